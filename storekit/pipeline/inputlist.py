"""Which files an input names, and the errors that name an input as the user gave it.

A local input is listed through a store rooted at the input (the directory, or a glob's leading
components): stores never follow a link, so a link is followed here only while its target stays
inside that root. A file named on its own is read even if it is a link (the user named it); one
pointing out of a directory or glob (`-> /etc/shadow`) is refused, so nobody's link can pull a file
the user did not name into a dataset (which may be world-readable).
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Callable, Iterable, Iterator

from storekit.config import mask_url
from storekit.errors import InputError, NotFoundError, StorekitError, not_regular, storage_error
from storekit.paths import resolves_outside
from storekit.places import is_s3_url
from storekit.store import Entry, Store

GLOB_CHARS = ("*", "?", "[")
Found = list[tuple[str, int, float | None]]  # (url, size, mtime) of each file an input names
StoreFor = Callable[[str], Store]  # a local directory -> a store rooted there


def expand_local(stores: StoreFor, pattern: str) -> Found:
    """The files a local file, directory (recursive) or glob names, sorted by path."""
    if any(c in pattern for c in GLOB_CHARS):
        root, rest = split_glob(pattern)
        store = stores(root or ".")
        return _files(store, root, (e for e in store.glob(rest) if shown(e.path, rest)))
    parent, name = os.path.split(os.path.realpath(pattern))
    try:
        entry = stores(parent).info(name)
    except NotFoundError:
        return []
    if entry.is_dir:
        return _files(stores(pattern), pattern, _walk(stores(pattern), pattern))
    require_regular(pattern)
    return [(os.path.abspath(pattern), entry.size, entry.mtime)]


def folder_member(stores: StoreFor, folder: str, name: str) -> Found:
    """The file `name` inside `folder`, as a file of a directory input is taken."""
    store = stores(folder)
    try:
        entry = store.info(name)
    except NotFoundError:
        return []
    return _files(store, folder, [entry])


def _walk(store: Store, root: str, rel: str = "") -> Iterator[Entry]:
    """Files and links below `rel`, hidden names left out; linked directories are not entered."""
    try:
        listed = store.list(rel)
    except StorekitError as exc:
        raise input_error(os.path.join(root, rel), exc) from None
    for entry in listed:
        if entry.name.startswith("."):
            continue
        if entry.is_dir:
            yield from _walk(store, root, entry.path)
        else:
            yield entry


def _files(store: Store, root: str, entries: Iterable[Entry]) -> Found:
    """(url, size, mtime) of `entries` of the store rooted at `root` ('' for a glob's current
    directory); a link is checked, then described by its target."""
    out = []
    for entry in entries:
        path = os.path.join(root, entry.path)  # as the user wrote the input: errors name it so
        check_link(path, root or ".")  # every path: a glob's ** walks into linked directories
        if entry.is_link:  # inside the root: described where it really is
            real = os.path.relpath(os.path.realpath(path), os.path.realpath(root or "."))
            entry = store.info(real)
        if not entry.is_dir:  # a linked directory inside the input is walked where it really is
            require_regular(path)
            out.append((os.path.abspath(path), entry.size, entry.mtime))
    return sorted(out)


def split_glob(pattern: str) -> tuple[str, str]:
    """(root, rest): the leading components without wildcards, and the pattern below them."""
    parts = pattern.split("/")
    fixed = 0
    while fixed < len(parts) - 1 and not any(c in parts[fixed] for c in GLOB_CHARS):
        fixed += 1
    root = "/".join(parts[:fixed]) or ("/" if pattern.startswith("/") else "")
    return root, "/".join(parts[fixed:])


def shown(rel: str, pattern: str = "") -> bool:
    """False for a path below an input with a hidden component (`.git`, `.x.swp`) that no component
    of the glob `pattern` spells with a leading dot: what a shell glob leaves out."""
    dotted = [p for p in pattern.split("/") if p.startswith(".")]
    return not any(
        name.startswith(".") and not any(fnmatch.fnmatchcase(name, p) for p in dotted)
        for name in rel.split("/")
    )


def require_regular(path: str) -> None:
    """Refuse a FIFO, a device or a socket up front: reading one would block or never end (one stat,
    following the link the user named or that stays inside the input)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # missing or unreadable: the reader says so, naming the input
    if not stat.S_ISREG(mode):
        raise input_error(path, not_regular(path, mode))


def check_link(path: str, root: str) -> None:
    """Refuse a path that a symbolic link leads out of `root` (or nowhere)."""
    outside = resolves_outside(path, root)
    if outside is not None:
        raise InputError(
            f"input {root}: {path} is a symbolic link to {outside}, outside the input; links out of an "
            "input directory or glob are not followed",
            hint="give the target as its own --input if you mean to read it, or remove the link",
        )
    if not os.path.exists(path):
        raise InputError(f"input {root}: {path} is a broken symbolic link (to {os.path.realpath(path)})")


def input_error(url: str, exc: Exception) -> StorekitError:
    """`exc` as a one-line error naming the input as the user gave it; whatever the one translator
    does not know is still bad input naming the URL."""
    where = f"input {mask_url(url)}"
    if not isinstance(exc, StorekitError):
        return storage_error(exc, where) or InputError(f"{where}: {type(exc).__name__}: {exc}")
    # a local store names the file by its file:// URL: the OS error it translated is named again
    cause = exc.__context__ if exc.__suppress_context__ and not is_s3_url(url) else None
    return (storage_error(cause, where) if isinstance(cause, OSError) else None) or exc
