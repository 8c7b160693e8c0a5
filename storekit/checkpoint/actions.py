"""verify, adopt and prune over scanned units: plans first, then the one destructive step each needs."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storekit import faults
from storekit.checkpoint.scan import COMPLETE, IN_PROGRESS, MANIFEST, RunScan, Unit
from storekit.durable import is_tombstone, remove_tree
from storekit.errors import InputError, MismatchError, NotFoundError, StorekitError, UsageError
from storekit.lease import Lease, sibling_lease_path
from storekit.manifest import Manifest, ManifestFile, read_manifest, verify_manifest, write_manifest
from storekit.ops import hash_file
from storekit.paths import join_rel
from storekit.store import Store


@dataclass
class CheckpointVerifyResult:
    unit: Unit
    digest: bool  # a storekit manifest exists and was re-hashed
    ok: bool
    files: int = 0
    bytes: int = 0
    problems: list[dict[str, str]] = field(default_factory=list)
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.unit.path,
            "writer": self.unit.writer,
            "state": self.unit.state,
            "digest": self.digest,
            "ok": self.ok,
            "files": self.files,
            "bytes": self.bytes,
            "problems": self.problems,
            "note": self.note,
        }


def verify_unit(store: Store, unit: Unit) -> CheckpointVerifyResult:
    """Re-hash a unit against its manifest: missing, changed and added files are all problems; a
    manifest that cannot be read is one too (exit 4 like any damage), so a run's verify goes on."""
    if unit.has_manifest and not unit.is_file:
        try:
            manifest = read_manifest(store, unit.path)
        except (InputError, NotFoundError) as exc:
            source = f"{store.display_url}/{manifest_path(unit)}"
            return CheckpointVerifyResult(
                unit=unit,
                digest=True,
                ok=False,
                files=unit.files,
                bytes=unit.bytes,
                problems=[{"path": MANIFEST, "problem": exc.message.removeprefix(f"{source}: ")}],
                note="its manifest is damaged: nothing in it can be checked",
            )
        problems = [
            {"path": p.path, "problem": p.problem} for p in verify_manifest(store, unit.path, manifest)
        ]
        problems += [{"path": rel, "problem": "not in the manifest (added after the commit)"} for rel in
                     _extra_files(store, unit, manifest)]  # fmt: skip
        return CheckpointVerifyResult(
            unit=unit,
            digest=True,
            ok=not problems and unit.state == COMPLETE,
            files=len(manifest.files),
            bytes=manifest.total_bytes,
            problems=problems,
            note="" if unit.state == COMPLETE else unit.reason,
        )
    return CheckpointVerifyResult(
        unit=unit,
        digest=False,
        ok=unit.state == COMPLETE,
        files=unit.files,
        bytes=unit.bytes,
        note=f"{unit.reason}; no digest exists (no storekit manifest: `storekit ckpt adopt` writes one)",
    )


def _extra_files(store: Store, unit: Unit, manifest: Manifest) -> list[str]:
    named = {f.path for f in manifest.files} | {MANIFEST}
    prefix = unit.path + "/"
    return sorted(
        rel
        for rel in (e.path[len(prefix) :] for e in store.walk(unit.path) if not e.is_dir)
        if rel not in named
    )


def adopt_manifest(store: Store, unit: Unit) -> Manifest:
    """The manifest `ckpt adopt` would write: sizes, xxh3-128, modes and mtimes of every file."""
    if unit.state != COMPLETE:
        raise InputError(
            f"{store.display_url}/{unit.path}: not a complete checkpoint ({unit.state}: {unit.reason})"
        )
    if unit.is_file:
        raise InputError(f"{store.display_url}/{unit.path}: a single-file checkpoint cannot hold a manifest")
    if unit.has_manifest:
        raise InputError(
            f"{store.display_url}/{unit.path}: already has {MANIFEST}",
            hint=f"storekit ckpt verify {unit.path}",
        )
    files, meta = [], []
    prefix = unit.path + "/"
    for entry in store.walk(unit.path):
        if entry.is_dir or entry.is_link:
            continue
        digest = hash_file(store, entry.path)
        rel = entry.path[len(prefix) :]
        files.append(ManifestFile(path=rel, size=digest.size, xxh3_128=digest.xxh3_128))
        meta.append(
            {
                "path": rel,
                "mode": f"{entry.mode:04o}" if entry.mode is not None else None,
                "mtime": entry.mtime,
            }
        )
    body = {"writer": unit.writer, "adopted": True, "step": unit.step, "file_meta": meta}
    return Manifest(kind="checkpoint", files=tuple(files), body=body)


def write_adopted(store: Store, unit: Unit, manifest: Manifest) -> None:
    """Re-check that nothing changed while hashing, then write manifest.json last and atomically."""
    after = {e.path: e for e in store.walk(unit.path) if not e.is_dir}
    meta = {m["path"]: m for m in manifest.body["file_meta"]}
    prefix = unit.path + "/"
    for rel, entry in ((p[len(prefix) :], e) for p, e in after.items()):
        if rel not in meta or entry.mtime != meta[rel]["mtime"]:
            raise MismatchError(f"{store.display_url}/{entry.path}: changed while it was being hashed")
    if len(after) != len(meta):
        raise MismatchError(f"{store.display_url}/{unit.path}: files disappeared while being hashed")
    write_manifest(store, unit.path, manifest)


@dataclass(frozen=True)
class PruneAction:
    unit: Unit
    delete: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.unit.path,
            "step": self.unit.step,
            "writer": self.unit.writer,
            "state": self.unit.state,
            "action": "delete" if self.delete else "keep",
            "reason": self.reason,
            "bytes": self.unit.bytes,
        }


def plan_prune(
    scan: RunScan,
    *,
    keep_last: int,
    keep_every: int | None = None,
    incomplete_older_than: float | None = None,
    now: float | None = None,
) -> list[PruneAction]:
    """Pure: which units to delete. Never the newest complete, a pointer's target or one in progress."""
    if keep_last < 1:
        raise UsageError("--keep-last must be at least 1 (the newest complete step is always kept)")
    if keep_every is not None and keep_every < 1:
        raise UsageError("--keep-every must be a positive number of steps")
    now = time.time() if now is None else now
    complete = scan.complete()
    recent = {u.name for u in complete[-keep_last:]}
    named = set(scan.pointers.values())
    actions = []
    for u in scan.units:
        if u.name in scan.kept and u.state == COMPLETE:  # the writer's own rotation keeps it too
            actions.append(PruneAction(u, False, f"the writer keeps it: {scan.kept[u.name]}"))
            continue
        actions.append(PruneAction(u, *_decide(u, recent, named, keep_every, incomplete_older_than, now)))
    return actions


def _decide(
    u: Unit, recent: set[str], named: set[str], every: int | None, older: float | None, now: float
) -> tuple[bool, str]:
    if u.is_temp and is_tombstone(u.name):
        return True, "tombstone of an interrupted delete"
    if u.name in named:
        return False, "named by a tracker or latest pointer"
    if u.state == IN_PROGRESS:
        return False, "in progress (changed within the quiet period)"
    if u.state == COMPLETE:
        if u.name in recent:
            return False, "among the newest complete steps (--keep-last)"
        if every and u.step is not None and u.step % every == 0:
            return False, f"step is a multiple of {every} (--keep-every)"
        return True, "older complete step"
    age = now - (u.newest_mtime or now)
    if older is None:
        return False, "incomplete: deleted only with --incomplete-older-than"
    if age < older:
        return False, f"incomplete, but changed {int(age)} s ago (< --incomplete-older-than)"
    return True, f"incomplete leftover ({u.reason})"


def apply_prune(store: Store, scan: RunScan, actions: list[PruneAction]) -> list[str]:
    """Delete what the plan says, each unit through a tombstone (rename, fsync, delete)."""
    if not store.capabilities.atomic_rename:
        raise StorekitError(
            f"tier {store.name} ({store.display_url}) has no atomic rename: prune works on POSIX tiers",
        )
    deleted = []
    for action in actions:
        if not action.delete:
            continue
        path = store.local_path(action.unit.path)
        assert path is not None  # POSIX tiers have local paths
        faults.point("ckpt.prune.before-delete")
        # a running tier archive or drain holds the unit's lease: exit 5 (retry) rather than delete
        # under it (taken and given back at once: a kill while held would leave it beside the run;
        # a move that starts right after finds the unit gone and rolls its copy back)
        with Lease(sibling_lease_path(Path(path)), purpose=f"running ckpt prune of {path}"):
            pass
        remove_tree(path)
        marker = scan.markers.get(action.unit.name)
        if marker is not None:  # NeMo's -unfinished marker goes with its unit(s), after them
            marker_path = store.local_path(marker)
            assert marker_path is not None
            if os.path.lexists(marker_path):  # x.ckpt and x-EMA.ckpt share one marker
                remove_tree(marker_path)
        deleted.append(action.unit.path)
    return deleted


def manifest_path(unit: Unit) -> str:
    return join_rel(unit.path, MANIFEST)
