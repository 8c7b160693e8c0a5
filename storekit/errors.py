"""The one table of errors and exit codes.

Every failure a user can cause or meet is a `StorekitError` subclass; the CLI turns it into a single
`error: ...` line, an optional `hint: ...` line and the exit code below. Anything else is a bug and
gets a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterator, Mapping
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
    ExitCode.RETRYABLE: "retryable: storage unreachable, transient failure, or busy",
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


class NotRegularFileError(InputError):
    """A FIFO, a device, a socket or a directory where storekit reads a file: refused, never opened
    for reading (a FIFO would block, /dev/zero never end)."""


def not_regular(path: str, mode: int) -> NotRegularFileError:
    import stat

    kinds = [
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
    ]
    kind = next((name for test, name in kinds if test(mode)), "not a file")
    return NotRegularFileError(f"{path}: not a regular file ({kind}); storekit reads regular files only")


def refuse_not_regular(path: str) -> None:
    """Raise not_regular when `path` names something that is not a regular file (a FIFO given as a
    config, pipeline or tokenizer file would block, a device never end); nothing when it is missing."""
    import os
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        raise not_regular(path, mode)


class Interrupted(StorekitError):
    exit_code = ExitCode.INTERRUPTED


class PermissionDeniedError(StorekitError):
    """The OS or the gateway refused access (permissions, read-only mount, bad or missing credentials)."""

    exit_code = ExitCode.ERROR


# -- translating what the OS, s3fs and botocore raise ------------------------------------------------
# The one answer to "which storekit error is this failure?": every module that touches storage asks here,
# so "no space" is exit 6 and "try again later" is exit 5 wherever the failure happens.

NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
DENIED_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
# Class names anywhere in an exception's MRO that mean "the network or the gateway failed, retry":
# builtin ConnectionError/TimeoutError (sockets, NFS ETIMEDOUT), botocore's HTTPClientError and
# ConnectionError (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError, ConnectionClosedError,
# ResponseStreamingError), urllib3's ProtocolError and http.client's IncompleteRead (a body cut short),
# aiohttp's ClientConnectionError (ClientConnectorError, ServerDisconnectedError, ClientOSError) and
# ServerTimeoutError, fsspec's FSTimeoutError. Names, not imports: botocore/aiohttp stay optional here.
RETRYABLE_NAMES = frozenset(
    {
        "ConnectionError",
        "TimeoutError",
        "HTTPClientError",
        "ProtocolError",
        "IncompleteRead",
        "ClientConnectionError",
        "ServerTimeoutError",
        "FSTimeoutError",
    }
)
# S3 error codes (botocore ClientError, also kept as the cause of s3fs's OSError) per class
NOT_FOUND_CODES = frozenset({"404", "NoSuchBucket", "NoSuchKey", "NoSuchUpload"})
DENIED_CODES = frozenset(
    {
        "403",
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "RequestTimeTooSkewed",
    }
)
RETRYABLE_CODES = frozenset(
    {"500", "502", "503", "504", "InternalError", "ServiceUnavailable", "SlowDown", "RequestTimeout"}
)


def failure_of(exc: BaseException) -> tuple[str, int]:
    """What a job record says of a task or run that ended with `exc`: its one-line message and exit
    code (storekit's own error as it is; a stop is exit 130; anything else names its type, exit 1)."""
    if isinstance(exc, StorekitError):
        return exc.message, int(exc.exit_code)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", int(ExitCode.INTERRUPTED)
    return f"{type(exc).__name__}: {exc}", int(ExitCode.ERROR)


def exception_chain(exc: BaseException | None) -> Iterator[BaseException]:
    """`exc`, then its causes/contexts (at most 10): libraries wrap the error that tells what happened."""
    seen = 0
    while exc is not None and seen < 10:
        yield exc
        exc = exc.__cause__ or exc.__context__
        seen += 1


def s3_error_code(exc: BaseException) -> str | None:
    """The S3 error code (else the HTTP status) of a botocore ClientError anywhere in the chain;
    None when no gateway answered."""
    for e in exception_chain(exc):
        response = getattr(e, "response", None)
        if isinstance(response, dict):
            code = response.get("Error", {}).get("Code") or response.get("ResponseMetadata", {}).get(
                "HTTPStatusCode"
            )
            if code:
                return str(code)
    return None


def is_retryable(exc: BaseException) -> bool:
    """A connection failure, a timeout or a gateway asking to slow down: exit 5, try again later."""
    for e in exception_chain(exc):
        if isinstance(e, StorekitError):
            return isinstance(e, UnreachableError)
        if RETRYABLE_NAMES & {c.__name__ for c in type(e).__mro__}:
            return True
    return s3_error_code(exc) in RETRYABLE_CODES


def error_class(exc: BaseException) -> type[StorekitError] | None:
    """The storekit error for a storage failure; None for anything else (a bug keeps its traceback)."""
    if isinstance(exc, StorekitError):
        return type(exc)
    code = exc.errno if isinstance(exc, OSError) else None
    s3_code = s3_error_code(exc)
    if code in NO_SPACE_ERRNOS:
        return NoSpaceError
    if isinstance(exc, (FileNotFoundError, NotADirectoryError)) or s3_code in NOT_FOUND_CODES:
        return NotFoundError
    if is_retryable(exc):
        return UnreachableError
    if isinstance(exc, PermissionError) or code in DENIED_ERRNOS or s3_code in DENIED_CODES:
        return PermissionDeniedError
    if any(type(e).__name__ == "NoCredentialsError" for e in exception_chain(exc)):
        return PermissionDeniedError
    if isinstance(exc, OSError) or s3_code is not None:
        return StorekitError
    return None


def storage_error(
    exc: BaseException, where: str, *, hints: Mapping[type[StorekitError], str] | None = None
) -> StorekitError | None:
    """`exc` as a one-line storekit error about `where` (a path, URL or target); None: not a storage failure.

    `hints` adds the caller's advice per class (e.g. "free space and rerun" for NoSpaceError).
    """
    if isinstance(exc, StorekitError):
        return exc
    cls = error_class(exc)
    if cls is None:
        return None
    hint = (hints or {}).get(cls)
    if cls is NoSpaceError:
        if isinstance(exc, OSError) and exc.errno == errno.EDQUOT:
            return NoSpaceError(f"{where}: {_quota_full(exc, where)}", hint=hint)
        return NoSpaceError(f"{where}: no space left on device", hint=hint)
    if cls is NotFoundError:
        if isinstance(exc, NotADirectoryError):
            return NotFoundError(f"{where}: not a directory (or a parent is not)", hint=hint)
        return NotFoundError(f"{where} does not exist", hint=hint)
    if cls is UnreachableError:
        return UnreachableError(f"cannot reach the storage for {where}", hint=hint)
    return cls(f"{where}: {_reason(exc)}", hint=hint)


@contextlib.contextmanager
def storage_errors(where: str, *, hints: Mapping[type[StorekitError], str] | None = None) -> Iterator[None]:
    """Translate storage failures inside the block with `storage_error`; other exceptions pass unchanged."""
    try:
        yield
    except Exception as exc:
        err = storage_error(exc, where, hints=hints)
        if err is None or err is exc:
            raise
        raise err from None


def _quota_full(exc: OSError, where: str) -> str:
    """EDQUOT as the quota that is full: which directory (the area, where init set the quota) and
    its limits, asked of the file system above the path that failed."""
    from storekit.fsfeatures import quota_root
    from storekit.units import format_bytes

    found = re.search(r"(?:file://)?(/[^\s:]*)", where)
    paths = [p for p in (exc.filename, found.group(1) if found else None) if isinstance(p, str)]
    for path in paths:
        root = quota_root(path)
        if root is not None:
            limits = [format_bytes(root.max_bytes)] if root.max_bytes else []
            limits += [f"{root.max_files} files"] if root.max_files else []
            area = os.path.basename(root.path)
            return f"the quota of area {area} ({root.path}) is full: {' and '.join(limits)}"
    return "disk quota exceeded"


def _reason(exc: BaseException) -> str:
    if any(type(e).__name__ == "NoCredentialsError" for e in exception_chain(exc)):
        return "no S3 credentials"
    code = s3_error_code(exc)
    if isinstance(exc, OSError) and exc.strerror:
        reason = exc.strerror[:1].lower() + exc.strerror[1:] if exc.strerror[1:2].islower() else exc.strerror
        return f"{reason} ({code})" if code and code not in reason else reason
    return code or f"{type(exc).__name__}: {exc}"
