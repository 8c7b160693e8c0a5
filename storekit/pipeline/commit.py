"""Where a finished dataset appears, and when: the place is checked first, then staged, then committed.

POSIX: everything is written into a hidden sibling (`.<version>.storekit-tmp-*`) that is renamed to
the final name once the manifest is inside it. S3 (no rename): shards go to their final keys and the
manifest is written last; without a manifest the prefix is not a dataset, and a killed finalize's
leftovers there are recognised as ours through a record in the work dir.
"""

from __future__ import annotations

import contextlib
import json
import uuid

from storekit.durable import TMP_MARK, write_file_atomic
from storekit.errors import InputError, NotFoundError, StorekitError
from storekit.manifest import Manifest, read_manifest
from storekit.paths import join_rel
from storekit.pipeline.location import DatasetLocation
from storekit.pipeline.workdir import WorkDir

_STAGING_RECORD = "finalize.json"


def check_existing(
    location: DatasetLocation, plan_id: str, *, force: bool, work: WorkDir | None
) -> Manifest | None:
    """The existing manifest if it is this very dataset (a no-op), None if the place is free.

    Raises when something else is there, unless `force`.
    """
    store, rel = location.store, location.rel
    try:
        manifest = read_manifest(store, rel)
    except NotFoundError:
        if not force and _occupied(location) and not _ours(location, work):
            raise StorekitError(
                f"{location.display} exists but is not a storekit dataset (no manifest.json)",
                hint="choose another --version or --output, or pass --force to replace it",
            ) from None
        return None
    except InputError as exc:
        if force:
            return None
        raise StorekitError(
            f"{location.display} holds an unreadable manifest ({exc})", hint="--force replaces it"
        ) from None
    if manifest.body.get("plan_id") == plan_id:
        return manifest
    if not force:
        raise StorekitError(
            f"{location.display} already holds a different dataset (other inputs or options; "
            f"plan {str(manifest.body.get('plan_id', '?'))[:12]}, this run {plan_id[:12]})",
            hint="give a new --version, or pass --force to replace it",
        )
    return None


def _occupied(location: DatasetLocation) -> bool:
    try:
        return bool(location.store.list(location.rel))
    except NotFoundError:
        return False


def _ours(location: DatasetLocation, work: WorkDir | None) -> bool:
    """Leftovers of our own finalize that was killed (S3 writes shards in place)."""
    if work is None or not (work.path / _STAGING_RECORD).is_file():
        return False
    record = json.loads((work.path / _STAGING_RECORD).read_bytes())
    return bool(record.get("output") == location.display)


class Staging:
    """Where finalize writes, and how the result becomes visible (rename or manifest-last)."""

    def __init__(self, location: DatasetLocation, work: WorkDir, *, force: bool) -> None:
        self.location = location
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

    def begin(self) -> None:
        record = json.dumps({"output": self.location.display}).encode()
        write_file_atomic(self.work.path / _STAGING_RECORD, record)
        if self.atomic_rename:
            self._remove_stale_siblings()
            self.store.makedirs(self.rel)
            return
        # S3: un-commit first (manifest), then clear the prefix, then upload
        with contextlib.suppress(NotFoundError):
            self.store.delete(join_rel(self.location.rel, "manifest.json"))
        with contextlib.suppress(NotFoundError):
            self.store.delete(self.location.rel, recursive=True)

    def _remove_stale_siblings(self) -> None:
        prefix = f".{self.location.name}{TMP_MARK}"
        try:
            entries = self.store.list(self.location.parent)
        except NotFoundError:
            return
        for entry in entries:
            if entry.name.startswith(prefix):
                self.store.delete(entry.path, recursive=True)

    def commit(self, plan_id: str) -> None:
        if not self.atomic_rename:
            return
        final = self.location.rel
        old = None
        if self.store.exists(final):
            # checked before the run; look again in case another run committed there meanwhile
            check_existing(self.location, plan_id, force=self.force, work=None)
            old = join_rel(self.location.parent, f".{self.location.name}{TMP_MARK}old-{uuid.uuid4().hex[:8]}")
            self.store.rename(final, old)
        self.store.rename(self.rel, final)
        if old:
            self.store.delete(old, recursive=True)

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self.store.delete(self.rel, recursive=True)
