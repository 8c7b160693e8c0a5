"""The layout's quotas and striping on the file system that holds the tier (storekit.fsfeatures):
what `init` sets, what `layout check` finds differing, and each area's quota for `status`."""

from __future__ import annotations

import contextlib
import os

from storekit.errors import storage_errors
from storekit.fsfeatures import DirSettings, DirUsage, FsBackend, backend_for
from storekit.layout.spec import AreaSpec, LayoutSpec
from storekit.store import Store

ACTION = "fs-set"  # a LayoutAction: set these declarations on the area directory


def wanted(area: AreaSpec) -> DirSettings:
    s = area.striping
    return DirSettings(
        quota_bytes=area.quota_bytes,
        quota_files=area.quota_files,
        stripe_count=s.count if s else None,
        stripe_size=s.size if s else None,
    )


def tier_backend(store: Store) -> FsBackend | None:
    root = store.local_path("") if store.capabilities.directories else None
    return None if root is None else backend_for(root)


def _why_not(store: Store) -> str:
    root = store.local_path("") if store.capabilities.directories else None
    if root is None:
        return "an object store has no quotas or striping"
    return "quotas and striping are set on CephFS and Lustre only; this is neither, or lfs is missing"


def plan_settings(spec: LayoutSpec, store: Store) -> tuple[list[tuple[str, str]], list[str]]:
    """([(area, detail)] to set, [skipped]) — detail is `FS: setting=value ...`, what apply sets."""
    todo: list[tuple[str, str]] = []
    skipped: list[str] = []
    declaring = [(a, wanted(a)) for a in spec.areas if wanted(a).declared()]
    if not declaring:
        return todo, skipped
    backend = tier_backend(store)
    for area, want in declaring:
        declared = " ".join(f"{k}={v}" for k, v in want.declared().items())
        if backend is None:
            skipped.append(f"{area.name}: {declared} ({_why_not(store)})")
            continue
        unsupported = [k for k, v in want.declared().items() if not backend.supports(k, v)]
        for k in unsupported:
            skipped.append(f"{area.name}: {k}={getattr(want, k)} has no {backend.fs} equivalent")
        path = str(store.local_path(area.name))
        if os.path.isdir(path):
            with _reading(backend, path):
                pending = {d.setting: d.want for d in backend.differences(path, want)}
        else:
            pending = {k: v for k, v in want.declared().items() if k not in unsupported}
        if pending:
            todo.append((area.name, f"{backend.fs}: " + " ".join(f"{k}={v}" for k, v in pending.items())))
    return todo, skipped


def apply_settings(store: Store, area: str, detail: str) -> list[str]:
    """Set what `detail` (from plan_settings) names on the area directory; what was set."""
    backend = tier_backend(store)
    if backend is None:
        return []
    values = dict(part.split("=") for part in detail.split(": ", 1)[1].split())
    want = DirSettings(**{k: int(v) for k, v in values.items()})
    path = str(store.local_path(area))
    with storage_errors(f"{path}: setting {detail}"):
        return backend.apply(path, want).done


def differences(spec: LayoutSpec, store: Store) -> list[tuple[str, str]]:
    """[(area, problem)] where the file system's quota or striping differs from the layout's."""
    backend = tier_backend(store)
    out: list[tuple[str, str]] = []
    if backend is None:
        return out
    for area in spec.areas:
        want = wanted(area)
        path = str(store.local_path(area.name))
        if want.declared() and os.path.isdir(path):
            with _reading(backend, path):
                found = backend.differences(path, want)
            out += [(area.name, f"{backend.fs}: {d.describe()}") for d in found]
    return out


def _reading(backend: FsBackend, path: str) -> contextlib.AbstractContextManager[None]:
    # lfs failing (project quotas not enabled, a timeout) is one error line naming the area, not a crash
    return storage_errors(f"{path}: reading its {backend.fs} quotas and striping")


def area_usage(store: Store, backend: FsBackend, area: str) -> tuple[DirUsage | None, DirSettings]:
    """An area's recursive totals as the file system keeps them (None: walk instead) and the quota
    it holds: what `status` reports without walking the tree."""
    path = str(store.local_path(area))
    with storage_errors(path):
        return backend.usage(path), backend.read(path)
