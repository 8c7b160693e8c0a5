"""Which directories storekit trusts on a shared machine, and how it pins the ones it made.

A private directory (a work dir) is only as private as the directories above it: whoever may rename
entries of a parent can swap the whole tree for their own after every check on the tree passed. So
every ancestor below a trusted anchor must be one nobody else can rename entries in:

    owned by the running user, by root, or by the owner of the anchor (the tier's admin), and
    not writable by group or others, unless sticky (then only an entry's owner may rename it).

The anchor is the configured tier root (the site's admin chose it) or the user's $HOME; above and
at the anchor nothing is checked. Without an anchor the walk goes up to `/`.

A directory storekit created is also pinned: its (device, inode) is recorded when it is made and
looked at again before anything read from it is published (`DirPin.check`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from storekit.errors import MismatchError, StorekitError


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
