"""Where a unit's copy lives: an S3 prefix (archive) or a POSIX directory (drain), one interface.

A destination is the unit-level operations of the tier's one `Store` instance
(`open_destination(store, rel)`): every path, key and URL of a move is that store's (`local_path`,
`key`, its root), what the move relies on is asked of its capabilities, probed per instance (atomic
rename before a POSIX copy is committed by a rename, free space before it is written). The bytes
take the fast paths under it: `ops.localcopy` between POSIX files, the transfer engine to and
from S3 (a client of the store's endpoint and bucket, sized for its pool).

copy(src, files)   copy every file, hashing it in the reading pass; each finished file is
                   read back (every byte, from the destination) while the next ones are copied;
                   returns {path: xxh3-128} of the source bytes, raises MismatchError on a
                   read-back that differs
clear()            before a copy: no manifest may vouch for bytes that are about to change
commit(manifest)   make the copy count: the manifest goes last (present = complete)
fetch(m, into)     materialize the files into the temp directory `into`, checked in the same pass
readback(m)        re-read every file against the manifest (`tier verify`)
discard(m)         remove an uncommitted copy (rollback, `tier gc`)
"""

from __future__ import annotations

import base64
import concurrent.futures as cf
import contextlib
import errno
import hashlib
import json
import os
import posixpath
import stat
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import xxhash

from storekit import faults
from storekit.config import TierConfig
from storekit.diskspace import free_bytes
from storekit.durable import (
    TMP_MARK,
    TOMBSTONE_MARK,
    fsync_dir,
    remove_tombstone,
    remove_tree,
    remove_write_temps,
    tombstone,
    write_synced,
)
from storekit.errors import NoSpaceError, NotFoundError, StorekitError, UsageError
from storekit.manifest import UNIT_MANIFEST_SUFFIX, UnitEntry, manifest_digest
from storekit.ops import FileDigest, check, hash_local, mismatch, verify_local
from storekit.ops.journal import FileUploadJournal
from storekit.ops.localcopy import copy_path
from storekit.ops.s3readback import readback_digest
from storekit.ops.s3transfer import (
    DownloadItem,
    S3Transfer,
    TransferConfig,
    UploadItem,
    UploadResult,
)
from storekit.store import S3Store, Store
from storekit.store.s3delete import check_unversioned, delete_keys, list_keys
from storekit.units import format_bytes

SPACE_PER_ENTRY = 4096  # a block per file, dir or link beyond their bytes (free-space check)
COPY_THREADS = 4  # files copied at once (POSIX): one file's fsync overlaps the others' copying


class Destination(Protocol):
    url: str
    manifest_url: str

    @property
    def store(self) -> Store:
        """The tier's store instance the copy is on: its paths, keys and capabilities."""
        ...

    def copy(
        self, src: Path, entries: Sequence[UnitEntry], on_copied: Callable[[dict[str, str]], None]
    ) -> dict[str, str]: ...

    def precheck(self) -> None:
        """Before anything is planned: can this destination hold a committed copy at all?"""

    def clear(self) -> None: ...

    def commit(self, manifest: bytes) -> None: ...

    def manifest(self) -> bytes | None: ...

    def uncommit(self) -> None: ...

    def fetch(self, files: Sequence[tuple[UnitEntry, str]]) -> None: ...

    def readback(self, files: Sequence[UnitEntry]) -> list[str]: ...

    def discard(self, files: Sequence[UnitEntry]) -> list[str]:
        """Remove an uncommitted copy: every file named and whatever else the move wrote there;
        returns what is still on the destination afterwards (empty: nothing left)."""
        ...

    def stamp(self, files: Sequence[UnitEntry]) -> str:
        """A cheap digest of how the copy's files stand now (no byte read): equal stamps mean the copy
        was not rewritten in between (storekit.tier.verified)."""
        ...

    def close(self) -> None: ...


class ReadBacks:
    """Read-backs running beside a copy, one file at a time on their own thread: `submit` each file
    as it lands, `wait` raises the first mismatch; leaving the block cancels those not started (the
    copy failed) and waits for the one running."""

    def __init__(self) -> None:
        self._pool = cf.ThreadPoolExecutor(1, thread_name_prefix="storekit-readback")
        self._futures: list[cf.Future[None]] = []

    def submit(self, check: Callable[..., None], *args: object) -> None:
        self._futures.append(self._pool.submit(check, *args))

    def wait(self) -> None:
        for fut in self._futures:
            fut.result()

    def __enter__(self) -> ReadBacks:
        return self

    def __exit__(self, *exc: object) -> None:
        for fut in self._futures:
            fut.cancel()
        self._pool.shutdown(wait=True)


def _stamp_of(parts: list[list[object]]) -> str:
    return xxhash.xxh3_128_hexdigest(json.dumps(parts, sort_keys=True, default=str).encode())


def _join(base: str, rel: str) -> str:
    return base if rel == "." else f"{base}/{rel}"


def _digest(entry: UnitEntry, xxh3_128: str | None = None) -> FileDigest:
    """What the entry's bytes must be: its manifest digest, or the one its copy computed."""
    return FileDigest(size=entry.size, xxh3_128=entry.xxh3_128 if xxh3_128 is None else xxh3_128)


# UNSIGNED-PAYLOAD: every file's bytes are read back and checked with xxh3-128 before its source is
# freed, so the SHA-256 body signature (CPU on the client and again in the gateway) adds no integrity;
# GET responses are never signed either. The manifest carries a Content-MD5 the gateway checks.
ARCHIVE_TRANSFER = TransferConfig(sign_payload=False)


def tier_transfer(tier: TierConfig) -> TransferConfig:
    """ARCHIVE_TRANSFER with what the tier's [tiers.NAME.transfer] table sets (config.py checked it)."""
    t = tier.transfer
    changes: dict[str, Any] = {}
    if "threads" in t:
        changes["threads"] = int(t["threads"])
    if "max_in_flight" in t:
        changes["max_in_flight_bytes"] = int(t["max_in_flight"])
    if "bandwidth" in t:
        changes["bandwidth"] = float(t["bandwidth"])
    if "retry_budget" in t:
        changes["retry"] = replace(ARCHIVE_TRANSFER.retry, budget_s=float(t["retry_budget"]))
    return replace(ARCHIVE_TRANSFER, **changes)


class S3Destination:
    """The unit's files under `<prefix>/<unit>/`, its manifest at `<prefix>/<unit>.storekit-archive.json`
    (keys from the store's `key`: its root's bucket and prefix)."""

    def __init__(
        self,
        store: S3Store,
        unit_rel: str,
        *,
        journal: FileUploadJournal | None,
        config: TransferConfig | None,
    ) -> None:
        self.store = store
        self.engine = _engine(store, config or tier_transfer(store.tier), journal)
        self.base = store.key(unit_rel)
        self.manifest_key = f"{self.base}{UNIT_MANIFEST_SUFFIX}"
        self.url = f"s3://{store.bucket}/{self.base}"
        self.manifest_url = f"s3://{store.bucket}/{self.manifest_key}"

    def key(self, rel: str) -> str:
        return _join(self.base, rel)

    def precheck(self) -> None:
        check_unversioned(self.engine)  # a versioned bucket keeps every "freed" byte forever

    def close(self) -> None:
        self.engine.close()

    def copy(
        self, src: Path, entries: Sequence[UnitEntry], on_copied: Callable[[dict[str, str]], None]
    ) -> dict[str, str]:
        files = [e for e in entries if e.type == "file"]
        by_key = {self.key(f.path): f for f in files}
        digests: dict[str, str] = {}
        with ReadBacks() as checks:

            def uploaded(r: UploadResult) -> None:
                """A file is up: its read-back starts now, while the next files still go up (one
                upload call for the whole unit, so the pipeline never drains between files)."""
                f = by_key[r.key]
                digests[f.path] = r.xxh3_128
                faults.point("tier.file-copied")
                if r.size == f.size:  # else the unit changed: reported below, before any read-back counts
                    checks.submit(self._check, [f], {f.path: r.xxh3_128})

            items = [UploadItem(_join(str(src), f.path), self.key(f.path)) for f in files]
            results = self.engine.upload_files(items, on_done=uploaded)
            for f, r in zip(files, results, strict=True):
                if r.size != f.size:
                    raise StorekitError(f"{_join(str(src), f.path)}: changed while being copied")
            on_copied(digests)
            checks.wait()
        return digests

    def _check(self, batch: Sequence[UnitEntry], digests: dict[str, str]) -> None:
        for f in batch:
            got = FileDigest(*readback_digest(self.engine, self.key(f.path)))
            check(f"s3://{self.engine.bucket}/{self.key(f.path)}", _digest(f, digests[f.path]), got)

    def clear(self) -> None:
        """The objects are overwritten in place: an older copy's manifest goes first."""
        if self.manifest() is not None:
            self.uncommit()

    def commit(self, manifest: bytes) -> None:
        self.engine.call(
            f"upload {self.manifest_url}",
            lambda: self.engine.client.put_object(
                Bucket=self.engine.bucket,
                Key=self.manifest_key,
                Body=manifest,
                ContentMD5=base64.b64encode(hashlib.md5(manifest).digest()).decode(),
            ),
        )

    def manifest(self) -> bytes | None:
        def get() -> bytes | None:
            try:
                resp = self.engine.client.get_object(Bucket=self.engine.bucket, Key=self.manifest_key)
            except Exception as exc:
                if _s3_missing(exc):
                    return None
                raise
            data: bytes = resp["Body"].read()
            return data

        return self.engine.call(f"read {self.manifest_url}", get)

    def uncommit(self) -> None:
        """Remove the manifest first: from then on no reader takes the copy as complete."""
        delete_keys(self.engine, [self.manifest_key])

    def fetch(self, files: Sequence[tuple[UnitEntry, str]]) -> None:
        # one call for the whole unit: ranges stream through the engine's window, each file's fsync
        # overlaps the next file's download instead of stopping the pipeline between batches
        self.engine.download_files([DownloadItem(self.key(f.path), t, f.xxh3_128) for f, t in files])
        for _ in files:
            faults.point("tier.file-fetched")

    def readback(self, files: Sequence[UnitEntry]) -> list[str]:
        problems = []
        for f in files:
            where = f"s3://{self.engine.bucket}/{self.key(f.path)}"
            try:
                got = FileDigest(*readback_digest(self.engine, self.key(f.path)))
            except StorekitError as exc:
                if "NoSuchKey" in str(exc) or "404" in str(exc):
                    problems.append(f"{where}: missing")
                    continue
                raise
            problem = mismatch(where, _digest(f), got)
            if problem is not None:
                problems.append(problem)
        return problems

    def stamp(self, files: Sequence[UnitEntry]) -> str:
        parts: list[list[object]] = []
        for f in files:
            key = self.key(f.path)

            def head_of(key: str = key) -> dict[str, Any]:
                out: dict[str, Any] = self.engine.client.head_object(Bucket=self.engine.bucket, Key=key)
                return out

            try:
                head = self.engine.call(f"stat s3://{self.engine.bucket}/{key}", head_of)
                parts.append(
                    [f.path, head.get("ContentLength"), head.get("ETag"), str(head.get("LastModified"))]
                )
            except StorekitError as exc:
                if "NoSuchKey" not in str(exc) and "404" not in str(exc) and "Not Found" not in str(exc):
                    raise
                parts.append([f.path, "missing"])
        return _stamp_of(parts)

    def discard(self, files: Sequence[UnitEntry]) -> list[str]:
        """The files named, and every object under the unit's prefix (a file the source lost or
        gained during the copy is not in `files`): the prefix is this unit's copy alone."""
        self.engine.abort_journaled()
        under = list(list_keys(self.engine, f"{self.base}/"))
        delete_keys(self.engine, [self.manifest_key, self.base] + [self.key(f.path) for f in files] + under)
        left = list(list_keys(self.engine, f"{self.base}/"))
        left += [k for k in (self.manifest_key, self.base) if _s3_exists(self.engine, k)]
        return [f"s3://{self.engine.bucket}/{k}" for k in sorted(left)]


def _engine(store: S3Store, config: TransferConfig, journal: FileUploadJournal | None) -> S3Transfer:
    """The transfer engine on the store's bucket and endpoint (payloads unsigned: ARCHIVE_TRANSFER)."""
    engine = S3Transfer.for_store(store, config=config, journal=journal)
    if store.name:  # every message names the tier, not just its endpoint
        engine.endpoint = f"tier {store.name} ({engine.endpoint})"
    return engine


def _s3_exists(engine: S3Transfer, key: str) -> bool:
    return next(iter(list_keys(engine, key)), None) == key  # the key itself lists first


def _s3_missing(exc: BaseException) -> bool:
    from storekit.errors import s3_error_code

    return s3_error_code(exc) in ("NoSuchKey", "404", "NotFound")


class PosixDestination:
    """The unit copied to `dest` (renamed into place from a temp sibling), the manifest beside it.

    `replaces` is the manifest digest of the unit's own older copy already at `dest` (drained,
    recalled, drained again): it stays committed while the new copy is made and read back in the
    temp sibling, and is swapped out only at the commit (manifest removed, old copy to a tombstone,
    new copy renamed in, new manifest, tombstone removed), so a kill anywhere leaves the source whole
    and at most one copy named by a manifest."""

    def __init__(self, store: Store, unit_rel: str, *, temp_tag: str, replaces: str = "") -> None:
        self.store = store
        self.tier_name = store.name
        head, name = posixpath.split(unit_rel)
        self.parent_rel = head
        self.dest = Path(_local(store, unit_rel))
        self.temp = Path(_local(store, posixpath.join(head, f".{name}{TMP_MARK}{temp_tag}")))
        self.manifest_path = Path(_local(store, f"{unit_rel}{UNIT_MANIFEST_SUFFIX}"))
        self.url = self.dest.as_uri()
        self.manifest_url = self.manifest_path.as_uri()
        self.replaces = replaces
        self.not_owned: list[str] = []  # entries the copy could not give their owner (not root)
        self.made_dirs: list[Path] = []  # parents this copy created (a rollback removes them, if empty)

    def close(self) -> None:
        pass

    def precheck(self) -> None:
        """The copy is committed by renaming it into place: a file system whose rename is a copy
        and a delete (a FUSE view of an object store) could show it half there."""
        if not self.store.capabilities.atomic_rename:
            raise StorekitError(
                f"{self.where} ({self.store.display_url}) has no atomic rename: "
                "a unit's copy there cannot appear whole",
                hint="drain to a POSIX file system, or archive to the object store's S3 endpoint",
            )

    def _holds_replaced(self) -> bool:
        """The manifest at the destination is the older copy this move replaces (still committed)."""
        data = self.manifest()
        return bool(self.replaces) and data is not None and manifest_digest(data) == self.replaces

    @property
    def where(self) -> str:
        """The tier as messages name it."""
        return f"tier {self.tier_name}" if self.tier_name else f"the tier at {self.dest.parent}"

    def copy(
        self, src: Path, entries: Sequence[UnitEntry], on_copied: Callable[[dict[str, str]], None]
    ) -> dict[str, str]:
        """Copy the whole tree into the temp sibling (`commit` renames it into place)."""
        remove_tree(self.temp)  # a killed run's partial copy: never committed
        where = self.where
        free = self.store.free_space(self.parent_rel) if self.store.capabilities.free_space else None
        need = sum(e.size for e in entries if e.type == "file")
        check_room(free, self.dest.parent, need, len(entries), where)
        self.made_dirs = make_parents(self.dest.parent, src.parent)
        try:
            return self._copy(src, entries, on_copied)
        except NoSpaceError as exc:  # what a full tier let us write counts for nothing: gone now
            remove_tree(self.temp)
            raise NoSpaceError(
                f"{where} is full: {exc.message}; the partial copy was removed",
                hint=f"free space on {where}, or move the unit to another tier",
            ) from None

    def _copy(
        self, src: Path, entries: Sequence[UnitEntry], on_copied: Callable[[dict[str, str]], None]
    ) -> dict[str, str]:
        digests: dict[str, str] = {}
        with (
            cf.ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="storekit-copy") as copier,
            ReadBacks() as checks,
        ):

            def copy_one(f: UnitEntry, target: str) -> None:
                digests[f.path] = _copy_file(_join(str(src), f.path), target, f)
                checks.submit(_check_local, target, f, digests[f.path])

            def put_files(files: list[tuple[UnitEntry, str]]) -> None:
                copies = [copier.submit(copy_one, f, t) for f, t in files]
                try:
                    for fut in copies:
                        fut.result()
                finally:
                    for fut in copies:
                        fut.cancel()
                    cf.wait(copies)

            self.not_owned = materialize(entries, self.temp, put_files)
            fsync_dir(self.dest.parent)
            on_copied(digests)
            checks.wait()
        return digests

    def clear(self) -> None:
        """The copy goes to the temp sibling: only a manifest that is not the replaced copy's goes."""
        if not self._holds_replaced():
            self.uncommit()

    def commit(self, manifest: bytes) -> None:
        remove_write_temps(self.manifest_path)
        # the manifest's bytes go down before anything is renamed: a tier that filled up since the
        # copy fails the commit here (NoSpaceError), with the copy still only in its temp sibling
        staged = self._stage_manifest(manifest)
        try:
            if self.temp.exists():
                if os.path.lexists(self.dest):
                    self._swap_out()
                os.rename(self.temp, self.dest)
                fsync_dir(self.dest.parent)
                faults.point("tier.renamed")
            elif not self.dest.exists():
                gone = f"{self.dest}: the copy to commit is gone (neither it nor its temp exists)"
                raise NotFoundError(gone)
            os.replace(staged, self.manifest_path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(staged)
            raise
        fsync_dir(self.dest.parent)
        faults.point("tier.manifest-written")
        self._purge_swapped()

    def _stage_manifest(self, manifest: bytes) -> str:
        """`manifest` written and fsynced under a write temp's name beside its final one (a kill
        leaves what remove_write_temps removes); a full tier is NoSpaceError, nothing left."""
        directory, name = os.path.split(self.manifest_path)
        staged = os.path.join(directory, f".{name}{TMP_MARK}commit")
        try:
            write_synced(staged, manifest, mode=0o644, exclusive=False)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                what = f"no space for the manifest {self.manifest_path}; the copy was removed"
                raise NoSpaceError(
                    f"{self.where} is full: {what}",
                    hint=f"free space on {self.where}, or move the unit to another tier",
                ) from None
            raise
        return staged

    def _swap_out(self) -> None:
        """The older copy leaves its place for the new one (already read back in the temp sibling):
        its manifest first, so no reader takes it as complete, then the copy to a tombstone."""
        if not self.replaces or not (self.manifest() is None or self._holds_replaced()):
            raise StorekitError(
                f"{self.dest}: appeared on the destination during the move; refusing to replace it"
            )
        self.uncommit()
        faults.point("tier.replaced-uncommitted")
        tombstone(self.dest)

    def _purge_swapped(self) -> None:
        """The replaced copy's tombstone (one a kill left too): only this destination's own."""
        prefix = f".{self.dest.name}{TOMBSTONE_MARK}"
        if not self.dest.parent.is_dir():  # a rollback of a move killed before it made the directory
            return
        for name in os.listdir(self.dest.parent):
            if name.startswith(prefix):
                remove_tombstone(str(self.dest.parent / name))

    def manifest(self) -> bytes | None:
        try:
            return self.manifest_path.read_bytes()
        except FileNotFoundError:
            return None

    def uncommit(self) -> None:
        try:
            self.manifest_path.unlink()
        except FileNotFoundError:
            return
        fsync_dir(self.dest.parent)

    def fetch(self, files: Sequence[tuple[UnitEntry, str]]) -> None:
        for f, target in files:
            stored = _join(str(self.dest), f.path)
            check(stored, _digest(f), copy_path(stored, target))
            faults.point("tier.file-fetched")

    def readback(self, files: Sequence[UnitEntry]) -> list[str]:
        problems = []
        base = self.temp if os.path.lexists(self.temp) else self.dest  # before the commit's rename
        for f in files:
            path = _join(str(base), f.path)
            try:
                got = hash_local(path, drop_cache=True)
            except FileNotFoundError:
                problems.append(f"{path}: missing")
                continue
            problem = mismatch(path, _digest(f), got)
            if problem is not None:
                problems.append(problem)
        return problems

    def stamp(self, files: Sequence[UnitEntry]) -> str:
        parts: list[list[object]] = []
        for f in files:
            try:
                st = os.stat(_join(str(self.dest), f.path))
                parts.append([f.path, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino])
            except FileNotFoundError:
                parts.append([f.path, "missing"])
        return _stamp_of(parts)

    def discard(self, files: Sequence[UnitEntry]) -> list[str]:
        """Only for a journaled move before its commit: its temp copy goes; so does what is at the
        destination, unless it is the still committed older copy this move was to replace."""
        remove_tree(self.temp)
        if not self._holds_replaced():
            self.uncommit()
            remove_tree(self.dest)
        self._purge_swapped()
        remove_write_temps(self.manifest_path)  # what a kill left of its write (we hold the unit's lease)
        for made in reversed(self.made_dirs):  # the run directories this copy made, deepest first
            with contextlib.suppress(OSError):
                made.rmdir()  # only if still empty: another writer's files keep it
        left = [self.temp] + ([] if self._holds_replaced() else [self.dest, self.manifest_path])
        left += [d for d in self.made_dirs if d.is_dir() and not any(d.iterdir())]  # not removable
        return [str(p) for p in left if os.path.lexists(p)]


def open_destination(
    store: Store,
    unit_rel: str,
    *,
    temp_tag: str = "unused",
    replaces: str = "",
    journal: FileUploadJournal | None = None,
    config: TransferConfig | None = None,
) -> Destination:
    """The copy of the unit at `unit_rel` on `store` (the tier's Store instance): an S3 prefix, or a
    directory of a POSIX mount (`temp_tag`, `replaces`: see PosixDestination)."""
    if isinstance(store, S3Store):
        return S3Destination(store, unit_rel, journal=journal, config=config)
    if store.local_path("") is not None:
        return PosixDestination(store, unit_rel, temp_tag=temp_tag, replaces=replaces)
    raise UsageError(
        f"tier {store.name} ({store.display_url}): units are moved to S3 buckets or POSIX directories"
    )


def unit_url(store: Store, unit_rel: str) -> str:
    """The URL a move's journal and results name the unit's copy by (no client made)."""
    if isinstance(store, S3Store):
        return f"s3://{store.bucket}/{store.key(unit_rel)}"
    return Path(_local(store, unit_rel)).as_uri()


def _local(store: Store, rel: str) -> str:
    path = store.local_path(rel)
    if path is None:
        raise UsageError(f"tier {store.name} ({store.display_url}) is not a POSIX directory")
    return path


def materialize(
    entries: Sequence[UnitEntry], root: Path, put_files: Callable[[list[tuple[UnitEntry, str]]], None]
) -> list[str]:
    """Create the unit's tree at `root` (must not exist): dirs, the files (`put_files` writes them),
    links, then owners, modes and mtimes exactly, directories deepest first once their contents are
    in. Returns the entries whose recorded owner could not be given back (not root: reported)."""
    single = len(entries) == 1 and entries[0].type != "dir"
    if not single:
        root.mkdir(mode=0o700)
    targets = [(e, str(root) if e.path == "." else _join(str(root), e.path)) for e in entries]
    for e, target in targets:
        if e.type == "dir" and e.path != ".":
            os.mkdir(target, 0o700)
    files = [(e, t) for e, t in targets if e.type == "file"]
    put_files(files)
    not_owned: list[str] = []
    for e, target in targets:
        if e.type == "file":
            _own(target, e, not_owned)  # before chmod: a chown clears set-id bits
            os.chmod(target, e.mode)
            os.utime(target, ns=(e.mtime_ns, e.mtime_ns))
        elif e.type == "symlink":
            os.symlink(e.target, target)
            _own(target, e, not_owned)
            os.utime(target, ns=(e.mtime_ns, e.mtime_ns), follow_symlinks=False)
    dirs = [(e, t) for e, t in targets if e.type == "dir"]
    for e, target in sorted(dirs, key=lambda et: -et[0].path.count("/") - (et[0].path != ".")):
        _own(target, e, not_owned)
        os.chmod(target, e.mode)
        os.utime(target, ns=(e.mtime_ns, e.mtime_ns))
        fsync_dir(target)
    return not_owned


def _own(target: str, e: UnitEntry, not_owned: list[str]) -> None:
    """Give the entry its recorded owner and group where this process may (root, or a user's own
    uid with one of its groups); else note it (the copy then belongs to whoever ran the move)."""
    if e.uid < 0 and e.gid < 0:
        return
    st = os.lstat(target)
    if (st.st_uid, st.st_gid) == (e.uid if e.uid >= 0 else st.st_uid, e.gid if e.gid >= 0 else st.st_gid):
        return
    try:
        os.lchown(target, e.uid, e.gid)
    except PermissionError:
        not_owned.append(e.path)


def make_parents(directory: Path, like: Path) -> list[Path]:
    """Create `directory` and its missing parents, each with the owner and mode of the matching
    ancestor of `like` where there is one (a drain as root leaves the run dir its user's); returns
    those it created, outermost first."""
    missing = []
    made: list[Path] = []
    d, s = directory, like
    while not d.exists():
        missing.append((d, s))
        d, s = d.parent, s.parent
    for d, s in reversed(missing):
        try:
            d.mkdir()
            made.append(d)
        except FileExistsError:  # another writer made it meanwhile: theirs
            continue
        try:
            st = s.stat()
        except OSError:
            continue
        with contextlib.suppress(PermissionError):
            os.chown(d, st.st_uid, st.st_gid)
        os.chmod(d, stat.S_IMODE(st.st_mode))
    return made


def _copy_file(src: str, dst: str, entry: UnitEntry) -> str:
    """Copy (storekit.ops.localcopy) with the digest of the source bytes computed in the same pass;
    a source whose size or mtime moved meanwhile is refused."""
    got = copy_path(src, dst)
    if got.size != entry.size:
        raise StorekitError(f"{src}: changed while being copied (size {entry.size} -> {got.size})")
    st = os.stat(src)
    if (st.st_size, st.st_mtime_ns) != (entry.size, entry.mtime_ns):
        raise StorekitError(f"{src}: changed while being copied", hint="copy it once its writer has finished")
    faults.point("tier.file-copied")
    return got.xxh3_128


def check_space(directory: Path, need_bytes: int, entries: int, where: str) -> None:
    """Refuse before writing when the file system of `directory` has not room for the copy (the
    free space an unprivileged writer may use, which a quota the file system reports also lowers)."""
    check_room(free_bytes(str(directory)), directory, need_bytes, entries, where)


def check_room(free: int | None, directory: Path, need_bytes: int, entries: int, where: str) -> None:
    """check_space with the free bytes at `directory` known (None: unknown, nothing refused)."""
    if free is None:
        return
    need = need_bytes + entries * SPACE_PER_ENTRY
    if free < need:
        raise NoSpaceError(
            f"{where} is full: the copy needs {format_bytes(need)} at {directory}, "
            f"{format_bytes(free)} free; nothing was written",
            hint=f"free space on {where}, or move the unit to another tier",
        )


def _check_local(path: str, entry: UnitEntry, expected: str) -> None:
    verify_local(path, _digest(entry, expected))
    faults.point("tier.file-read-back")
