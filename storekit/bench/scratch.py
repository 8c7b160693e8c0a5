"""The only place a benchmark writes: `<target>/scratch/storekit-bench-<run-id>/`.

The run directory is created exclusively, so everything in it is ours. Cleanup deletes only the
names the plan says the run may create (and directories this run made), so even a stray file someone
drops in the run directory survives. Free space is checked before anything is written.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from storekit.bench import leftovers
from storekit.bench.plan import RUN_PREFIX, SCRATCH
from storekit.bench.spec import TargetSpec
from storekit.config import TierConfig, mask_url
from storekit.errors import (
    NoSpaceError,
    NotFoundError,
    PathEscapeError,
    PermissionDeniedError,
    StorekitError,
    UnreachableError,
    error_class,
    storage_error,
    storage_errors,
)
from storekit.paths import resolves_outside
from storekit.store import open_store
from storekit.store.s3delete import DeleteFailed, delete_keys
from storekit.units import format_bytes

PROBE = ".storekit-bench-probe"
T = TypeVar("T")


class PosixScratch:
    """The run directory on a POSIX target. The target's Store answers what it can do (free space,
    probed per instance); the files themselves are the benchmark's engines' (bench.engine_posix:
    O_DIRECT, io_uring), which measure the raw file system, so they take plain paths below it."""

    def __init__(self, target: TargetSpec, run_id: str) -> None:
        self.target = target
        self.root = target.root
        url = Path(os.path.abspath(target.root)).as_uri()
        self.store = open_store(TierConfig(name=target.tier or "target", url=url))
        self.scratch = os.path.join(self.root, SCRATCH)
        self.run_root = os.path.join(self.scratch, RUN_PREFIX + run_id)
        self.created_scratch = False
        self.created_dirs: list[str] = []  # relative to run_root, in creation order
        self.extra_files: list[str] = []
        self.reclaimed: list[dict[str, Any]] = []

    def reclaim_dead(self) -> list[dict[str, Any]]:
        """Remove run directories our own killed predecessors left (see bench.leftovers)."""
        if os.path.isdir(self.scratch) and not os.path.islink(self.scratch):
            self.reclaimed = leftovers.reclaim_dead_runs(self.scratch)
        return self.reclaimed

    def reclaimable(self) -> list[str]:
        """What reclaim_dead would remove (read-only, for --dry-run)."""
        if not os.path.isdir(self.scratch) or os.path.islink(self.scratch):
            return []
        return [path for path, _ in leftovers.dead_runs(self.scratch)]

    def full(self, rel: str) -> str:
        return os.path.join(self.run_root, rel)

    def check(self, space_needed: int) -> None:
        """Refuse before writing: missing or unwritable target, escaping scratch/, too little space."""
        if not os.path.isdir(self.root):
            raise NotFoundError(
                f"target {self.root} does not exist or is not a directory",
                hint="create it (storekit init creates a tier's layout) or fix --target/--tier",
            )
        # only scratch/ is written: it must be writable (or creatable in a writable root)
        if os.path.lexists(self.scratch):
            if not os.path.isdir(self.scratch):
                raise StorekitError(f"{self.scratch} exists and is not a directory")
            real, root_real = os.path.realpath(self.scratch), os.path.realpath(self.root)
            if resolves_outside(real, root_real) is not None or real == root_real:  # must be below the root
                raise PathEscapeError(f"{self.scratch} resolves to {real}, outside the target {root_real}")
            writes_to = self.scratch
        else:
            writes_to = self.root
        st = os.statvfs(writes_to)
        if st.f_flag & os.ST_RDONLY or not os.access(writes_to, os.W_OK):
            raise StorekitError(
                f"target {self.root} is not writable ({writes_to})", hint="benchmark a writable mount"
            )
        free = self.store.free_space(SCRATCH) if self.store.capabilities.free_space else None
        if free is not None and free < space_needed:
            have, need = format_bytes(free), format_bytes(space_needed)
            raise NoSpaceError(
                f"target {self.root} has {have} free; this run needs {need}",
                hint="lower --size/--files/--ranks or free space; nothing was written",
            )

    def create(self) -> None:
        with storage_errors(self.run_root):
            if not os.path.isdir(self.scratch):
                os.mkdir(self.scratch)
                self.created_scratch = True
            os.mkdir(self.run_root, 0o755)
            leftovers.write_owner(self.run_root)  # lets a later run reclaim this one if it is killed

    def makedirs(self, rels: Iterable[str]) -> None:
        for rel in sorted(set(rels), key=lambda r: r.count("/")):
            path = self.full(rel)
            if not os.path.isdir(path):
                os.mkdir(path)
                self.created_dirs.append(rel)

    def remove(self, rels: Iterable[str]) -> int:
        removed = 0
        for rel in rels:
            try:
                os.unlink(self.full(rel))
                removed += 1
            except FileNotFoundError:
                pass
        return removed

    def remove_dirs(self, rels: Iterable[str]) -> list[str]:
        """Remove directories this run created (deepest first); returns those not empty."""
        not_empty = []
        wanted = set(rels)
        for rel in sorted(wanted, key=lambda r: -r.count("/")):
            if rel not in self.created_dirs:
                continue
            try:
                os.rmdir(self.full(rel))
                self.created_dirs.remove(rel)
            except FileNotFoundError:
                self.created_dirs.remove(rel)
            except OSError:
                not_empty.append(self.full(rel))
        return not_empty

    def cleanup(self, created_paths: Iterable[str]) -> dict[str, Any]:
        removed = self.remove(itertools.chain(created_paths, self.extra_files))
        left = self.remove_dirs(list(self.created_dirs))
        self.remove([leftovers.OWNER_FILE])  # last: a kill before here leaves a reclaimable run
        for path, ours in ((self.run_root, True), (self.scratch, self.created_scratch)):
            if not ours:
                continue
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError:
                left.append(path)
                break
        return {"removed_files": removed, "leftovers": left, "reclaimed": self.reclaimed}


class S3Scratch:
    def __init__(self, target: TargetSpec, run_id: str) -> None:
        from storekit.bench.engine_s3 import make_client

        self.target = target
        self.bucket = target.bucket
        prefix = target.prefix.strip("/")
        self.run_root = "/".join(p for p in (prefix, SCRATCH, RUN_PREFIX + run_id) if p)
        self.client = make_client(target)
        self.extra_files: list[str] = []
        self.reclaimed: list[dict[str, Any]] = []

    def reclaim_dead(self) -> list[dict[str, Any]]:
        return []  # no process to ask on S3: leftovers there need a lifecycle rule on scratch/

    def reclaimable(self) -> list[str]:
        return []

    def full(self, rel: str) -> str:
        return f"{self.run_root}/{rel}"

    def check(self, space_needed: int) -> None:
        """The bucket must exist and be reachable (S3 reports no free space)."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except Exception as exc:
            raise s3_error(exc, self.target) from None

    def create(self) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self.full(PROBE), Body=b"")
            self.extra_files.append(PROBE)
        except Exception as exc:
            raise s3_error(exc, self.target) from None

    def makedirs(self, rels: Iterable[str]) -> None:
        return None  # prefixes need no creation

    @property
    def endpoint(self) -> str:  # for store.s3delete's messages
        return mask_url(self.target.endpoint_url or "the default endpoint")

    def call(self, what: str, fn: Callable[[], T]) -> T:
        return fn()  # the client retries every call itself (engine_s3.make_client)

    def remove(self, rels: Iterable[str]) -> int:
        """Delete the run's keys the store's way (every key's answer checked, listed again); how
        many are gone. What could not be deleted stays listed under the run: cleanup reports it."""
        keys = sorted({self.full(rel) for rel in rels})
        try:
            delete_keys(self, keys)
        except DeleteFailed as exc:
            return len(keys) - len(exc.failed)
        return len(keys)

    def remove_dirs(self, rels: Iterable[str]) -> list[str]:
        return []

    def cleanup(self, created_paths: Iterable[str]) -> dict[str, Any]:
        removed = self.remove(itertools.chain(created_paths, self.extra_files))
        uploads = self.client.list_multipart_uploads(Bucket=self.bucket, Prefix=self.run_root + "/")
        for upload in uploads.get("Uploads", []):
            self.client.abort_multipart_upload(
                Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
            )
        left = self.client.list_objects_v2(Bucket=self.bucket, Prefix=self.run_root + "/", MaxKeys=10)
        keys = [f"s3://{self.bucket}/{o['Key']}" for o in left.get("Contents", [])]
        return {"removed_files": removed, "leftovers": keys, "reclaimed": []}


def s3_error(exc: BaseException, target: TargetSpec) -> StorekitError:
    """A failed request on the target's bucket, classified by the one translator in storekit.errors."""
    endpoint = target.endpoint_url or "the default endpoint"
    if error_class(exc) is NotFoundError:  # head_bucket is the only call that can miss
        where = f"bucket {target.bucket!r}"
    else:
        where = f"{target.display} at {endpoint}"
    hints: dict[type[StorekitError], str] = {
        NotFoundError: f"create it first (at {endpoint})",
        PermissionDeniedError: "check the credentials in env/AWS config (or a tier's key/secret)",
        UnreachableError: "check --endpoint-url and that the gateway is up",
    }
    return storage_error(exc, where, hints=hints) or StorekitError(f"{where}: {type(exc).__name__}: {exc}")


def open_scratch(target: TargetSpec, run_id: str) -> PosixScratch | S3Scratch:
    return PosixScratch(target, run_id) if target.kind == "posix" else S3Scratch(target, run_id)
