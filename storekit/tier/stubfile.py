"""Stubs as files on a POSIX tier: where a unit's stub is, reading and writing it durably.

The format is storekit.stubs's (tier name + paths relative to it, never a URL).
"""

from __future__ import annotations

import os
from pathlib import Path

from storekit.durable import fsync_dir, write_file_atomic
from storekit.errors import NotRegularFileError
from storekit.stubs import STUB_MAX_BYTES, STUB_SUFFIX, Stub, StubError, parse_stub, render_stub
from storekit.trusted_dirs import read_small_file


def stub_path(unit_path: str | os.PathLike[str]) -> Path:
    path = Path(unit_path)
    return path.parent / f"{path.name}{STUB_SUFFIX}"


def read_stub(path: str | os.PathLike[str]) -> Stub | None:
    """The stub at `path`, None when there is none; StubError (exit 4) when it is not a valid one
    (a FIFO or a device under a stub's name, beside a user's data, is refused, never read)."""
    try:
        data = read_small_file(path, limit=STUB_MAX_BYTES)
    except FileNotFoundError:
        return None
    except NotRegularFileError as exc:
        why = exc.message.removeprefix(f"{os.fspath(path)}: ")
        raise StubError(f"{os.fspath(path)}: not a storekit stub ({why})") from None
    return parse_stub(data, str(path))


def write_stub(unit_path: str | os.PathLike[str], stub: Stub) -> Path:
    path = stub_path(unit_path)
    write_file_atomic(path, render_stub(stub), mode=0o644)
    fsync_dir(path.parent)
    return path
