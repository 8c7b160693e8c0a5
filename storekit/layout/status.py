"""`storekit status`: bytes, files and free space per area per tier, and a Prometheus textfile."""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field

from storekit.diskspace import free_bytes
from storekit.errors import StorekitError, UnreachableError
from storekit.fsfeatures import FsBackend
from storekit.layout import fsapply
from storekit.layout.spec import LayoutSpec
from storekit.metrics import Metrics
from storekit.store import Store

OTHER = "(other)"  # entries outside any area


@dataclass
class AreaUsage:
    area: str
    bytes: int = 0
    files: int = 0
    dirs: int = 0
    free_bytes: int | None = None
    quota_bytes: int | None = None  # the layout's
    exists: bool = True
    quota_files: int | None = None  # the layout's
    fs_quota_bytes: int | None = None  # the quota the file system enforces (CephFS, Lustre), if any
    fs_quota_files: int | None = None
    usage_source: str = "walk"  # or the file system's own totals: "cephfs" (rstats), "lustre" (project)


@dataclass
class TierStatus:
    tier: str
    url: str
    role: str
    reachable: bool
    error: str | None = None
    free_bytes: int | None = None
    areas: list[AreaUsage] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def tier_status(spec: LayoutSpec, store: Store) -> TierStatus:
    started = time.monotonic()
    status = TierStatus(tier=store.name, url=store.display_url, role=store.tier.role, reachable=True)
    try:
        store.probe()
        down = root_missing(store)
        if down is not None:
            raise UnreachableError(down)
        status.free_bytes = store.free_space()
        top = {e.name: e for e in store.list("")} if store.exists("") else {}
        usage = {
            a.name: AreaUsage(area=a.name, quota_bytes=a.quota_bytes, quota_files=a.quota_files)
            for a in spec.areas
        }
        backend = fsapply.tier_backend(store) if top else None
        other = AreaUsage(area=OTHER)
        for name, entry in top.items():
            target = usage.get(name, other)
            if entry.is_link:
                continue
            if not entry.is_dir:
                target.bytes += entry.size
                target.files += 1
                continue
            if backend is not None and target is not other and _fs_usage(store, backend, target):
                continue  # O(1): the file system keeps the tree's totals
            for sub in store.walk(name):
                if sub.is_dir:
                    target.dirs += 1
                elif not sub.is_link:
                    target.bytes += sub.size
                    target.files += 1
        for area in usage.values():
            area.exists = area.area in top
            area.free_bytes = _area_free(store, area.area) if area.exists else status.free_bytes
            if area.fs_quota_bytes is not None:  # what the quota leaves, when less than statfs says
                left = max(0, area.fs_quota_bytes - area.bytes)
                area.free_bytes = left if area.free_bytes is None else min(left, area.free_bytes)
        status.areas = list(usage.values()) + ([other] if other.files or other.dirs else [])
    except StorekitError as exc:
        status.reachable = False
        status.error = exc.message
    status.seconds = round(time.monotonic() - started, 3)
    return status


def _fs_usage(store: Store, backend: FsBackend, target: AreaUsage) -> bool:
    try:
        totals, held = fsapply.area_usage(store, backend, target.area)
    except StorekitError:  # the file system's tool or xattrs failed: the walk still counts
        return False
    target.fs_quota_bytes, target.fs_quota_files = held.quota_bytes, held.quota_files
    if totals is None:
        return False
    target.bytes, target.files, target.dirs = totals.bytes, totals.files, totals.dirs
    target.usage_source = backend.fs
    return True


def root_missing(store: Store) -> str | None:
    """Why a file:// tier whose root does not exist is down (an unmounted mount point's directory is
    gone too; `storekit init` creates a new tier's root)."""
    root = store.tier.local_root
    if root is None or os.path.isdir(root):
        return None
    return f"tier {store.name}: root {root} does not exist (not mounted?)"


def _area_free(store: Store, area: str) -> int | None:
    # an area can be its own mount (scratch on local NVMe, datasets on Lustre): ask it directly
    path = store.local_path(area)
    if path is None:
        return store.free_space()
    return free_bytes(path)


_HELP = {
    "storekit_tier_up": "1 if the tier answered, 0 if unreachable.",
    "storekit_tier_free_bytes": "Bytes free on the tier, where the backend reports it.",
    "storekit_status_scan_seconds": "Seconds the status scan of the tier took.",
    "storekit_area_bytes": "Bytes stored in a layout area.",
    "storekit_area_files": "Files stored in a layout area.",
    "storekit_area_dirs": "Directories in a layout area.",
    "storekit_area_free_bytes": "Bytes free on the filesystem holding the area.",
    "storekit_area_quota_bytes": "The area's quota from the layout, in bytes.",
    "storekit_area_quota_files": "The area's file-count quota from the layout.",
    "storekit_area_fs_quota_bytes": "The byte quota the file system enforces on the area (CephFS, Lustre).",
    "storekit_area_fs_quota_files": "The file-count quota the file system enforces on the area.",
    "storekit_status_timestamp_seconds": "When storekit status last wrote this file.",
}


def status_prometheus_text(statuses: list[TierStatus], *, now: float | None = None) -> str:
    """Tier and area usage as storekit_* metrics for node_exporter's textfile collector (rendered by
    storekit.metrics, as bench io's are: bench.report.bench_prometheus_text)."""
    m = Metrics()

    def gauge(name: str, labels: dict[str, str], value: float | None) -> None:
        m.gauge(name, _HELP[name], labels, value)

    for st in statuses:
        t = {"tier": st.tier, "role": st.role}
        gauge("storekit_tier_up", t, int(st.reachable))
        gauge("storekit_status_scan_seconds", t, st.seconds)
        gauge("storekit_tier_free_bytes", t, st.free_bytes)
    for st in statuses:
        for a in st.areas:
            labels = {"tier": st.tier, "role": st.role, "area": a.area}
            gauge("storekit_area_bytes", labels, a.bytes)
            gauge("storekit_area_files", labels, a.files)
            gauge("storekit_area_dirs", labels, a.dirs)
            gauge("storekit_area_free_bytes", labels, a.free_bytes)
            gauge("storekit_area_quota_bytes", labels, a.quota_bytes)
            gauge("storekit_area_quota_files", labels, a.quota_files)
            gauge("storekit_area_fs_quota_bytes", labels, a.fs_quota_bytes)
            gauge("storekit_area_fs_quota_files", labels, a.fs_quota_files)
    gauge("storekit_status_timestamp_seconds", {}, round(time.time() if now is None else now, 3))
    return m.render()
