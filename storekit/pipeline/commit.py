"""Where a finished dataset appears, and when: the place is checked first, then staged, then committed.

POSIX: everything is written into a hidden sibling (`.<version>.storekit-tmp-*`) that is renamed to
the final name once the manifest is inside it. S3 (no rename): shards go to their final keys and the
manifest is written last; without a manifest the prefix is not a dataset, and a killed finalize's
leftovers there are recognised as ours through a record in the work dir.

One run at a time writes a dataset path: it holds the output lease (`.<version>.storekit-lease`
beside the dataset) from before its first task until after the commit, so a sibling temp dir is never
another live run's, and a second run exits 5. `--force` replaces only a committed storekit dataset
under `datasets/` on a configured tier. A replace renames the old copy to `.<version>.storekit-tmp-old-*`
first: that name is its journal. Until the new copy is in place the old one is only moved, and a run
that finds the final name empty and an old copy beside it (a stop between the two renames) puts the
old copy back before anything else.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from pathlib import Path

import xxhash

from storekit import faults
from storekit.durable import TMP_MARK, TOMBSTONE_MARK, exchange, write_file_atomic
from storekit.errors import InputError, NotFoundError, StorekitError
from storekit.jobdir import check_private
from storekit.lease import LEASE_NAME, Lease, sibling_lease_path
from storekit.manifest import Manifest, read_manifest
from storekit.paths import join_rel
from storekit.pipeline.areamodes import drop_others_write, make_parents
from storekit.pipeline.location import DatasetLocation
from storekit.pipeline.workdir import WorkDir
from storekit.trusted_dirs import anchor_for, check_ancestors, mark, marked, user_key

_STAGING_RECORD = "finalize.json"
_OLD = "old-"  # .<version>.storekit-tmp-old-*: the previous copy during a --force replace
DATASETS_AREA = "datasets"


def check_existing(
    location: DatasetLocation, plan_id: str, *, force: bool, work: WorkDir | None
) -> Manifest | None:
    """The existing manifest if it is this very dataset (a no-op), None if the place is free.

    Raises when something else is there; with `force`, a different committed dataset may be
    replaced when `replaceable(location)`, and nothing else ever is.
    """
    store, rel = location.store, location.rel
    try:
        manifest = read_manifest(store, rel)
    except NotFoundError:
        if _occupied(location) and not _ours(location, work):
            raise StorekitError(
                f"{location.display} exists but is not a storekit dataset (no manifest.json); "
                "storekit never replaces it",
                hint="choose another --version or --output",
            ) from None
        return None
    except InputError as exc:
        raise StorekitError(
            f"{location.display} holds an unreadable manifest ({exc}); storekit never replaces it",
            hint="choose another --version or --output, or inspect it and remove it by hand",
        ) from None
    foreign = foreign_owner(location)
    if foreign is not None:
        raise StorekitError(
            f"{location.display} holds a dataset owned by uid {foreign}, not by you "
            f"(uid {os.geteuid()}) or root: storekit neither adopts nor replaces it",
            hint="choose another --version or --output; ask its owner if it should be shared",
        )
    if manifest.kind != "dataset":
        raise StorekitError(
            f"{location.display} holds a {manifest.kind}, not a dataset; storekit never replaces it",
            hint="choose another --version or --output",
        )
    if manifest.body.get("plan_id") == plan_id:
        return manifest
    if force and replaceable(location):
        return None
    different = (
        f"{location.display} already holds a different dataset (other inputs or options; "
        f"plan {str(manifest.body.get('plan_id', '?'))[:12]}, this run {plan_id[:12]})"
    )
    if not replaceable(location):
        raise StorekitError(
            f"{different}; --force replaces only a dataset below {DATASETS_AREA}/ on a configured tier",
            hint="give another --version or --output",
        )
    raise StorekitError(different, hint="give a new --version, or pass --force to replace it")


def foreign_owner(location: DatasetLocation, rel: str | None = None) -> int | None:
    """The uid of someone else (neither this user nor root) who owns the dataset directory at `rel`
    (default: the location) or its manifest; None when it is ours to trust (or not local)."""
    local = location.store.local_path(rel or location.rel)
    if local is None:
        return None
    trusted = (os.geteuid(), 0)
    for path in (local, os.path.join(local, "manifest.json")):
        try:
            uid = os.lstat(path).st_uid
        except FileNotFoundError:
            continue
        if uid not in trusted:
            return uid
    return None


def replaceable(location: DatasetLocation) -> bool:
    """Where `--force` may replace a committed dataset: below datasets/ on a configured tier."""
    return location.tier_name is not None and location.rel.startswith(f"{DATASETS_AREA}/")


def output_lease(location: DatasetLocation, work: WorkDir) -> Lease:
    """The lease on a dataset path: beside it on POSIX; for an S3 output, beside the work dir (S3 has
    no exclusive create here, so runs see each other only when their work dirs share a parent)."""
    local = location.local_path() if location.store.capabilities.atomic_rename else None
    if local is not None:
        check_output_parents(location, Path(local))
        if location.tier_name is not None:  # datasets/<kind>/<name> as the layout wants them
            make_parents(location.store, location.parent)
        location.store.makedirs(location.parent)
        path = sibling_lease_path(Path(local))
    else:
        work.path.parent.mkdir(parents=True, exist_ok=True)
        path = work.path.parent / f".output-{xxhash.xxh3_64_hexdigest(location.display.encode())}{LEASE_NAME}"
    return Lease(path, purpose=f"writing the dataset {location.display}")


def check_output_parents(location: DatasetLocation, local: Path) -> None:
    """The staging dir and the old copy of a replace live beside the dataset: refuse a parent in
    which someone else could rename them (trusted up to the tier root, see storekit.trusted_dirs)."""
    root = location.store.local_path("") if location.tier_name is not None else None
    anchor = Path(root) if root else anchor_for(local, [])
    check_ancestors(local, anchor, "dataset")


def settle_leftovers(location: DatasetLocation) -> None:
    """Under the output lease: put back the old copy of an interrupted replace, then remove every
    temp sibling (no live run owns one: the lease says so). Only what this user made counts: a
    look-alike another user planted beside the dataset is neither put in place nor removed."""
    if not location.store.capabilities.atomic_rename:
        return
    store = location.store
    prefix = f".{location.name}{TMP_MARK}"
    try:
        # a temp sibling, or the tombstone of one whose removal was stopped (`..v1.storekit-tmp-*`)
        leftovers = [
            e
            for e in store.list(location.parent)
            if (e.name.startswith(prefix) or (e.name.startswith("." + prefix) and TOMBSTONE_MARK in e.name))
            and foreign_owner(location, e.path) is None
        ]
    except NotFoundError:
        return
    olds = [e for e in leftovers if e.name.startswith(prefix + _OLD) and TOMBSTONE_MARK not in e.name]
    ours = sorted(e.path for e in olds if _set_aside_by_us(location, e.name[len(prefix + _OLD) :], e.path))
    restored = None
    if ours and not store.exists(location.rel):
        restored = ours[-1]
        store.rename(restored, location.rel)
    for entry in leftovers:
        if entry.path != restored and (entry not in olds or entry.path in ours):
            store.delete(entry.path, recursive=True)


def _set_aside_by_us(location: DatasetLocation, suffix: str, rel: str) -> bool:
    """An old copy's name is `.<version>.storekit-tmp-old-NONCE-TAG`: TAG binds this user's key
    (trusted_dirs.user_key) to that directory. Owning it is not enough: a copy made by hand, by
    root or by another tool under that name is neither put in place nor removed."""
    nonce, _, tag = suffix.partition("-")
    local = location.store.local_path(rel)
    if local is None or not tag:
        return False
    try:
        st = os.lstat(local)
    except OSError:
        return False
    return marked(user_key(create=False), nonce, tag, st)


def _occupied(location: DatasetLocation) -> bool:
    try:
        return bool(location.store.list(location.rel))
    except NotFoundError:
        return False


def _ours(location: DatasetLocation, work: WorkDir | None) -> bool:
    """Leftovers of our own finalize that was killed (S3 writes shards in place). Only a private
    work dir's record counts: a planted one must not make someone else's prefix look like ours."""
    if work is None or not (work.path / _STAGING_RECORD).is_file():
        return False
    try:
        check_private(work.path)
    except StorekitError:
        return False
    record = json.loads((work.path / _STAGING_RECORD).read_bytes())
    return bool(record.get("output") == location.display)


class Staging:
    """Where finalize writes, and how the result becomes visible (rename or manifest-last)."""

    def __init__(
        self, location: DatasetLocation, work: WorkDir, *, force: bool, lease: Lease | None = None
    ) -> None:
        self.location = location
        self.lease = lease  # the output lease; checked again just before the commit
        self.store = location.store
        self.work = work
        self.force = force
        # POSIX-like stores: stage in a hidden sibling, then rename; others (S3): in place, manifest last
        self.atomic_rename = location.store.capabilities.atomic_rename
        prefix = f".{location.name}{TMP_MARK}"
        self.rel = (
            join_rel(location.parent, f"{prefix}{uuid.uuid4().hex[:12]}")
            if self.atomic_rename
            else location.rel
        )
        self.old: str | None = None
        self.committed = False

    def begin(self) -> None:
        """Call with the output lease held."""
        record = json.dumps({"output": self.location.display}).encode()
        write_file_atomic(self.work.path / _STAGING_RECORD, record)
        if self.atomic_rename:
            settle_leftovers(self.location)
            self.store.makedirs(self.rel)
            return
        # S3: un-commit first (manifest), then clear the prefix, then upload
        with contextlib.suppress(NotFoundError):
            self.store.delete(join_rel(self.location.rel, "manifest.json"))
        with contextlib.suppress(NotFoundError):
            self.store.delete(self.location.rel, recursive=True)

    def commit(self, plan_id: str) -> None:
        if not self.atomic_rename:
            return
        if self.location.tier_name is not None:
            drop_others_write(self.store, self.rel)  # a read-only area's dataset, whatever the umask
        faults.point("commit.before-rename")
        if self.lease is not None:
            self.lease.check()
        final = self.location.rel
        if self.store.exists(final):
            # checked before the run; look again in case another run committed there meanwhile
            check_existing(self.location, plan_id, force=self.force, work=None)
            if self._exchange(final):
                return
            old_name = f".{self.location.name}{TMP_MARK}{_OLD}{self._old_suffix(final)}"
            self.old = join_rel(self.location.parent, old_name)
            self.store.rename(final, self.old)
            faults.point("commit.old-moved")
        self.store.rename(self.rel, final)
        self.committed = True
        faults.point("commit.renamed")
        self._drop_old()

    def _old_suffix(self, final: str) -> str:
        """NONCE-TAG: what lets a rerun of this user (and only it) put this old copy back after a
        kill; without a key (no private state dir) the copy is only set aside, never put back by
        a rerun (a stop in this run still puts it back)."""
        nonce = uuid.uuid4().hex[:8]
        key, local = user_key(create=True), self.store.local_path(final)
        if key is None or local is None:
            return nonce
        return f"{nonce}-{mark(key, nonce, os.lstat(local))}"

    def _exchange(self, final: str) -> bool:
        """A replace in one step where the file system can: the new copy takes the final name and
        the old one the staging name at once, so the dataset path is never empty (a kill leaves
        the new dataset, and its old copy for the next run to remove). False: not done, nothing moved."""
        staging, target = self.store.local_path(self.rel), self.store.local_path(final)
        if staging is None or target is None:
            return False
        try:
            exchange(staging, target)
        except OSError:
            return False  # ENOSYS, EINVAL (NFS, old kernels): the journaled two renames instead
        self.committed, self.old = True, self.rel
        faults.point("commit.exchanged")
        faults.point("commit.renamed")
        self._drop_old()
        return True

    def _drop_old(self) -> None:
        """After the commit: the old copy goes, best effort. The new dataset is in place, so a
        failure here (a full disk, a kill) is not the run's failure; the next run removes it."""
        if self.old:
            with contextlib.suppress(StorekitError, OSError):
                self.store.delete(self.old, recursive=True)

    def abort(self) -> None:
        """After a failure or a stop: the old copy goes back if it was moved, the staging dir goes."""
        if self.old and not self.committed:
            with contextlib.suppress(Exception):
                if not self.store.exists(self.location.rel):
                    self.store.rename(self.old, self.location.rel)
        if not self.committed:
            with contextlib.suppress(Exception):
                self.store.delete(self.rel, recursive=True)
