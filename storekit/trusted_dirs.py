"""Which directories storekit trusts on a shared machine, and how it pins the ones it made.

A private directory (a work dir) is only as private as the directories above it: whoever may rename
entries of a parent can swap the whole tree for their own after every check on the tree passed. So
every ancestor below a trusted anchor must be one nobody else can rename entries in:

    owned by the running user, by root, or by the owner of the anchor (the tier's admin), and
    not writable by group or others, unless sticky (then only an entry's owner may rename it).

The anchor is the configured tier root (the site's admin chose it) or the user's $HOME; above and
at the anchor nothing is checked. Without an anchor the walk goes up to `/`.

A directory storekit created is also pinned: its (device, inode) is recorded when it is made and
looked at again before anything read from it is published (`DirPin.check`), and held open
(`HeldDir`): what feeds a commit is read through that descriptor, never by the name again, so a
rename of the directory or of anything above it cannot change what is read.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import os
import secrets
import stat
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from storekit.errors import MismatchError, NotRegularFileError, StorekitError, not_regular


def home_dir() -> Path | None:
    try:
        import pwd

        return Path(os.path.realpath(pwd.getpwuid(os.geteuid()).pw_dir))
    except (KeyError, ImportError, OSError):
        return None


def anchor_for(path: Path, roots: list[str]) -> Path | None:
    """The nearest trusted anchor above `path`: a tier root among `roots`, else $HOME, else None."""
    real = Path(os.path.realpath(path))
    candidates = [Path(os.path.realpath(r)) for r in roots]
    home = home_dir()
    if home is not None and home != Path("/"):
        candidates.append(home)
    inside = [c for c in candidates if real == c or c in real.parents]
    return max(inside, key=lambda c: len(c.parts)) if inside else None


def unsafe_ancestor(path: Path, anchor: Path | None) -> str | None:
    """Why one of `path`'s ancestors lets someone else swap `path` (None if none does)."""
    real = Path(os.path.realpath(path.parent))
    if anchor is not None:
        anchor = Path(os.path.realpath(anchor))
    allowed = {os.geteuid(), 0}
    if anchor is not None:
        with contextlib.suppress(OSError):
            allowed.add(os.stat(anchor).st_uid)
    for folder in (real, *real.parents):
        if anchor is not None and (folder == anchor or folder in anchor.parents):
            return None
        try:
            st = os.lstat(folder)
        except FileNotFoundError:
            continue  # made below by us, later
        if st.st_uid not in allowed:
            return f"{folder} is owned by uid {st.st_uid} (who may rename what is inside it)"
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            mode = stat.S_IMODE(st.st_mode)
            return f"{folder} is writable by group or others without the sticky bit (mode {mode:04o})"
    return None


def check_ancestors(path: Path, anchor: Path | None, what: str) -> None:
    problem = unsafe_ancestor(path, anchor)
    if problem:
        raise StorekitError(
            f"{what} {path}: {problem}; refusing to use it (someone else could swap it)",
            hint="use a directory whose parents only you or root can change (e.g. under $HOME)",
        )


@dataclass(frozen=True)
class DirPin:
    """The identity of a directory storekit made or checked, opened without following links."""

    path: Path
    dev: int
    ino: int

    @classmethod
    def take(cls, path: Path) -> DirPin:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        return cls(path, st.st_dev, st.st_ino)

    def check(self) -> None:
        """MismatchError (exit 4) when the name now leads to another directory."""
        try:
            now = DirPin.take(self.path)
        except OSError:
            now = None
        if now is None or (now.dev, now.ino) != (self.dev, self.ino):
            raise MismatchError(
                f"{self.path} was replaced while this run used it: nothing was published",
                hint="someone else can rename entries of its parent; use a private --work-dir",
            )


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class HeldDir:
    """A directory opened once, by its name, with O_DIRECTORY|O_NOFOLLOW; every later read resolves
    names from that descriptor (openat), one component at a time and never through a link. Renaming
    the directory, or any directory above it, afterwards changes nothing read through it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, _DIR_FLAGS)
        self._closer = weakref.finalize(self, os.close, self.fd)

    def close(self) -> None:
        self._closer()

    def identity(self) -> tuple[int, int]:
        st = os.fstat(self.fd)
        return st.st_dev, st.st_ino

    def _open_dir(self, parts: list[str]) -> int:
        """A new descriptor of the directory `parts` below this one (the caller closes it)."""
        fd = os.dup(self.fd)
        for part in parts:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            finally:
                os.close(fd)
            fd = nxt
        return fd

    def open(self, rel: str) -> BinaryIO:
        """The regular file `rel` (a/b/c) below this directory, for reading."""
        *dirs, name = rel.split("/")
        folder = self._open_dir(dirs)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=folder)
        finally:
            os.close(folder)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise IsADirectoryError(f"{self.path / rel}: not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")

    def read_bytes(self, rel: str) -> bytes:
        with self.open(rel) as fh:
            return fh.read()

    def listdir(self, rel: str = "") -> list[str]:
        fd = self._open_dir([p for p in rel.split("/") if p])
        try:
            return os.listdir(fd)
        finally:
            os.close(fd)

    def via(self, rel: str) -> Path:
        """A name for `rel` that the kernel resolves through the descriptor (/proc/self/fd/N/rel),
        for what takes a path (numpy, scratch files); the directory's own name where /proc is absent."""
        proc = Path(f"/proc/self/fd/{self.fd}")
        return proc / rel if os.path.isdir(proc) else self.path / rel


def read_small_file(path: str | os.PathLike[str], *, limit: int) -> bytes:
    """A small file storekit reads by name where someone else may have put something else (a lease
    in a shared directory, a stub beside a user's data): opened without blocking and without
    following a last link, refused unless a regular file (a FIFO would block open() forever, a
    device never end), and never read past `limit` bytes. FileNotFoundError when there is none;
    NotRegularFileError for a FIFO, device, socket, directory or link, or a file over `limit`."""
    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise not_regular(name, os.lstat(name).st_mode) from None  # a link, never followed
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise not_regular(name, mode)
        os.set_blocking(fd, True)
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise NotRegularFileError(f"{name}: larger than {limit} bytes")
    return data


# -- the user's own key: what tells a rerun that something beside a dataset was made by this user's
# storekit, not merely owned by this user or root (a copy made by hand, by root, by another tool)
KEY_NAME = "owner.key"


def state_dir() -> Path | None:
    """$STOREKIT_STATE_DIR, else $XDG_STATE_HOME/storekit, else ~/.local/state/storekit."""
    explicit = os.environ.get("STOREKIT_STATE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_STATE_HOME")
    if xdg:
        return Path(xdg) / "storekit"
    home = home_dir()
    return home / ".local" / "state" / "storekit" if home is not None else None


def user_key(*, create: bool) -> bytes | None:
    """32 random bytes in a 0600 file of this user's private state dir (0700), made on first use
    (`create`); None where there is none and none can be made (no home, not writable, not private)."""
    folder = state_dir()
    if folder is None:
        return None
    path = folder / KEY_NAME
    with contextlib.suppress(OSError):
        return _read_key(path)
    if not create:
        return None
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        pass  # another run made it first
    except OSError:
        return None
    else:
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(32))
            fh.flush()
            os.fsync(fh.fileno())
    try:
        return _read_key(path)
    except OSError:
        return None


def _read_key(path: Path) -> bytes:
    """The key, only from a regular file and dir of this user's that nobody else may read or write."""
    me = os.geteuid()
    folder = os.lstat(path.parent)
    if not stat.S_ISDIR(folder.st_mode) or folder.st_uid != me or folder.st_mode & 0o077:
        raise PermissionError(f"{path.parent} is not a private directory of uid {me}")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != me or st.st_mode & 0o077:
            raise PermissionError(f"{path} is not a private file of uid {me}")
        key = fh.read(64)
    if len(key) != 32:
        raise PermissionError(f"{path} is not a storekit key")
    return key


def mark(key: bytes, nonce: str, st: os.stat_result) -> str:
    """A tag for a directory this run set aside under a name holding `nonce`: it binds the user's
    key to that very directory (its inode: a rename keeps it, a copy does not; not the device
    number, which an NFS remount changes), so neither a copy nor a look-alike carries it."""
    msg = f"{nonce}\0{st.st_ino}".encode()
    return hmac.new(key, msg, hashlib.sha256).hexdigest()[:32]


def marked(key: bytes | None, nonce: str, tag: str, st: os.stat_result) -> bool:
    return key is not None and hmac.compare_digest(mark(key, nonce, st), tag)
