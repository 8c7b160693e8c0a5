"""A unit's fingerprint: every file's size, mtime_ns, ctime_ns, inode and mode, and one digest of them.

A plan records the digest; `--apply` takes the fingerprint again right before moving the unit and
skips it when the digest differs (a file was added, removed, rewritten, or even touched). ctime and
inode catch what a copy that restores mtime (`cp -p`, rsync) would hide.
"""

from __future__ import annotations

import os
import stat
from dataclasses import asdict, dataclass

import xxhash

from storekit.errors import NotFoundError, storage_errors
from storekit.store import ScanEntry, Store


@dataclass(frozen=True, kw_only=True)
class FileStat:
    rel: str  # relative to the unit ('' for a unit that is one file)
    size: int
    mtime_ns: int
    ctime_ns: int  # 0 where the tier has none (S3)
    inode: int  # 0 where the tier has none (S3)
    mode: int
    is_dir: bool = False
    is_link: bool = False

    def line(self) -> str:
        kind = "l" if self.is_link else "d" if self.is_dir else "f"
        fields = (self.rel, kind, self.size, self.mtime_ns, self.ctime_ns, self.inode, f"{self.mode:o}")
        return "\0".join(str(f) for f in fields) + "\n"


@dataclass(frozen=True)
class Fingerprint:
    files: tuple[FileStat, ...]

    @property
    def digest(self) -> str:
        h = xxhash.xxh3_128()
        for f in self.files:
            h.update(f.line().encode("utf-8", "surrogateescape"))
        return h.hexdigest()

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files if not f.is_dir and not f.is_link)

    @property
    def file_count(self) -> int:
        return sum(1 for f in self.files if not f.is_dir)

    def differences(self, other: Fingerprint, limit: int = 3) -> list[str]:
        """What changed from `self` (planned) to `other` (now), in words, for the skip reason."""
        mine, theirs = {f.rel: f for f in self.files}, {f.rel: f for f in other.files}
        out = [f"{r or '.'} removed" for r in sorted(set(mine) - set(theirs))]
        out += [f"{r or '.'} added" for r in sorted(set(theirs) - set(mine))]
        for rel in sorted(set(mine) & set(theirs)):
            a, b = mine[rel], theirs[rel]
            if a != b:
                what = [k for k, v in asdict(a).items() if asdict(b)[k] != v]
                out.append(f"{rel or '.'} {'/'.join(what)} changed")
        return out[:limit] + ([f"{len(out) - limit} more"] if len(out) > limit else [])


def fingerprint_of(store: Store, rel: str) -> Fingerprint:
    """The fingerprint of the unit at `rel` (a directory or a single file); NotFoundError if gone.

    Directories are read with the store's streaming scanner (`Store.scan`): one listing per
    directory on POSIX, one paginated listing on S3 (no ctime or inode there: 0 and mtime).
    """
    local = store.local_path(rel)
    if local is not None:
        with storage_errors(local):
            try:
                top = os.lstat(local)
            except FileNotFoundError:
                raise NotFoundError(f"{store.display_url}/{rel}: no such unit") from None
        if not stat.S_ISDIR(top.st_mode):
            return Fingerprint((_stat("", top),))
    else:
        entry = store.info(rel)  # NotFoundError when gone
        if not entry.is_dir:
            mtime = 0 if entry.mtime is None else round(entry.mtime * 1e9)
            return Fingerprint((FileStat(rel="", size=entry.size, mtime_ns=mtime, ctime_ns=0, inode=0,
                                         mode=entry.mode or 0),))  # fmt: skip
    cut = len(rel.rstrip("/")) + 1
    files = (_scanned(e, e.rel[cut:]) for e in store.scan(rel))
    return Fingerprint(tuple(sorted(files, key=lambda f: f.rel)))


def _stat(rel: str, st: os.stat_result) -> FileStat:
    return FileStat(
        rel=rel,
        size=0 if stat.S_ISDIR(st.st_mode) else st.st_size,
        mtime_ns=st.st_mtime_ns,
        ctime_ns=st.st_ctime_ns,
        inode=st.st_ino,
        mode=stat.S_IMODE(st.st_mode),
        is_dir=stat.S_ISDIR(st.st_mode),
        is_link=stat.S_ISLNK(st.st_mode),
    )


def _scanned(e: ScanEntry, rel: str) -> FileStat:
    return FileStat(
        rel=rel,
        size=0 if e.is_dir else e.size,  # a directory's st_size says nothing about its files
        mtime_ns=e.mtime_ns,
        ctime_ns=e.ctime_ns,
        inode=e.inode,
        mode=stat.S_IMODE(e.mode),
        is_dir=e.is_dir,
        is_link=e.is_link,
    )
