"""The one table of errors and exit codes.

Every failure a user can cause or meet is a `StorekitError` subclass; the CLI turns it into a single
`error: ...` line, an optional `hint: ...` line and the exit code below. Anything else is a bug and
gets a traceback.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1  # bad input data, failed operation
    USAGE = 2  # bad command line or bad config/spec file
    NOT_FOUND = 3  # a named path, tier, dataset or bucket does not exist
    MISMATCH = 4  # verification mismatch or layout violations found
    RETRYABLE = 5  # storage unreachable or a transient failure: try again later
    NO_SPACE = 6  # not enough free space for the requested work (refused before writing)
    INTERRUPTED = 130  # Ctrl-C / SIGTERM: work stopped cleanly, rerun to resume


EXIT_CODE_TABLE: dict[int, str] = {
    ExitCode.OK: "success",
    ExitCode.ERROR: "error: bad input or a failed operation",
    ExitCode.USAGE: "usage: bad command line, config file or spec file",
    ExitCode.NOT_FOUND: "not found: a path, tier, dataset or bucket does not exist",
    ExitCode.MISMATCH: "mismatch: verification failed or layout violations found",
    ExitCode.RETRYABLE: "retryable: storage unreachable, transient failure, or busy (another run)",
    ExitCode.NO_SPACE: "no space: not enough free space, nothing was written",
    ExitCode.INTERRUPTED: "interrupted: stopped cleanly, rerun to resume",
}


class StorekitError(Exception):
    """A failure with a one-line message for users."""

    exit_code: ExitCode = ExitCode.ERROR

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(StorekitError):
    exit_code = ExitCode.USAGE


class ConfigError(StorekitError):
    """A config or spec file is malformed: names the file, the key and what was expected."""

    exit_code = ExitCode.USAGE

    def __init__(self, file: str, key: str | None, problem: str, *, hint: str | None = None) -> None:
        where = f"{file}: {key}" if key else file
        super().__init__(f"{where}: {problem}", hint=hint)
        self.file = file
        self.key = key


class NotFoundError(StorekitError):
    exit_code = ExitCode.NOT_FOUND


class MismatchError(StorekitError):
    exit_code = ExitCode.MISMATCH


class UnreachableError(StorekitError):
    exit_code = ExitCode.RETRYABLE


class BusyError(StorekitError):
    """Another live process holds the lease on what this command would write: retry later."""

    exit_code = ExitCode.RETRYABLE


class NoSpaceError(StorekitError):
    exit_code = ExitCode.NO_SPACE


class PathEscapeError(StorekitError):
    """A path would leave the root it is confined to (`..`, absolute, or a symlink pointing out)."""

    exit_code = ExitCode.USAGE


class InputError(StorekitError):
    """Bad input data (malformed record, wrong encoding, missing field): names file and line."""

    exit_code = ExitCode.ERROR


class Interrupted(StorekitError):
    exit_code = ExitCode.INTERRUPTED
