"""`storekit status`: bytes, files and free space per area per tier, and a Prometheus textfile."""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field

from storekit.durable import write_file_atomic
from storekit.errors import StorekitError
from storekit.layout.spec import LayoutSpec
from storekit.store import Store

OTHER = "(other)"  # entries outside any area


@dataclass
class AreaUsage:
    area: str
    bytes: int = 0
    files: int = 0
    dirs: int = 0
    free_bytes: int | None = None
    quota_bytes: int | None = None
    exists: bool = True


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
        status.free_bytes = store.free_space()
        top = {e.name: e for e in store.list("")} if store.exists("") else {}
        usage = {a.name: AreaUsage(area=a.name, quota_bytes=a.quota_bytes) for a in spec.areas}
        other = AreaUsage(area=OTHER)
        for name, entry in top.items():
            target = usage.get(name, other)
            if entry.is_link:
                continue
            if not entry.is_dir:
                target.bytes += entry.size
                target.files += 1
                continue
            for sub in store.walk(name):
                if sub.is_dir:
                    target.dirs += 1
                elif not sub.is_link:
                    target.bytes += sub.size
                    target.files += 1
        for area in usage.values():
            area.exists = area.area in top
            area.free_bytes = _area_free(store, area.area) if area.exists else status.free_bytes
        status.areas = list(usage.values()) + ([other] if other.files or other.dirs else [])
    except StorekitError as exc:
        status.reachable = False
        status.error = exc.message
    status.seconds = round(time.monotonic() - started, 3)
    return status


def _area_free(store: Store, area: str) -> int | None:
    # an area can be its own mount (scratch on local NVMe, datasets on Lustre): ask it directly
    path = store.local_path(area)
    if path is None:
        return store.free_space()
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_text(statuses: list[TierStatus], *, now: float | None = None) -> str:
    """node_exporter textfile-collector format; metric names are storekit_*."""
    metrics: dict[str, tuple[str, list[str]]] = {
        "storekit_tier_up": ("1 if the tier answered, 0 if unreachable.", []),
        "storekit_tier_free_bytes": ("Bytes free on the tier, where the backend reports it.", []),
        "storekit_area_bytes": ("Bytes stored in a layout area.", []),
        "storekit_area_files": ("Files stored in a layout area.", []),
        "storekit_area_dirs": ("Directories in a layout area.", []),
        "storekit_area_free_bytes": ("Bytes free on the filesystem holding the area.", []),
        "storekit_area_quota_bytes": ("The area's quota from the layout, in bytes.", []),
        "storekit_status_scan_seconds": ("Seconds the status scan of the tier took.", []),
    }
    for st in statuses:
        t = f'tier="{_label(st.tier)}",role="{_label(st.role)}"'
        metrics["storekit_tier_up"][1].append(f"storekit_tier_up{{{t}}} {int(st.reachable)}")
        metrics["storekit_status_scan_seconds"][1].append(f"storekit_status_scan_seconds{{{t}}} {st.seconds}")
        if st.free_bytes is not None:
            metrics["storekit_tier_free_bytes"][1].append(f"storekit_tier_free_bytes{{{t}}} {st.free_bytes}")
        for a in st.areas:
            labels = f'{t},area="{_label(a.area)}"'
            metrics["storekit_area_bytes"][1].append(f"storekit_area_bytes{{{labels}}} {a.bytes}")
            metrics["storekit_area_files"][1].append(f"storekit_area_files{{{labels}}} {a.files}")
            metrics["storekit_area_dirs"][1].append(f"storekit_area_dirs{{{labels}}} {a.dirs}")
            if a.free_bytes is not None:
                metrics["storekit_area_free_bytes"][1].append(
                    f"storekit_area_free_bytes{{{labels}}} {a.free_bytes}"
                )
            if a.quota_bytes is not None:
                metrics["storekit_area_quota_bytes"][1].append(
                    f"storekit_area_quota_bytes{{{labels}}} {a.quota_bytes}"
                )
    lines: list[str] = []
    for name, (help_text, samples) in metrics.items():
        if not samples:
            continue
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", *samples]
    stamp = time.time() if now is None else now
    lines += [
        "# HELP storekit_status_timestamp_seconds When storekit status last wrote this file.",
        "# TYPE storekit_status_timestamp_seconds gauge",
        f"storekit_status_timestamp_seconds {stamp:.3f}",
    ]
    return "\n".join(lines) + "\n"


def write_textfile(path: str, text: str) -> None:
    """Atomic (temp + rename in the same directory), as the textfile collector requires."""
    try:
        write_file_atomic(path, text.encode("utf-8"))
    except OSError as exc:
        raise StorekitError(f"cannot write {path}: {exc.strerror or exc}") from None
