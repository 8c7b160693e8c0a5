"""The units a policy can choose from on one tier: complete checkpoints, committed datasets, stubs.

Checkpoints come from `scan_area_run` (the writers' rules), so a unit is whole by the same judgement
as `ckpt list` and `layout check`; datasets are version directories with their `committed_by` file
(manifest.json). Each candidate says why it may be copied but never freed (`protect`), whatever a
policy asks: the newest complete checkpoint of its run, one a tracker names, one changed within the
area's quiet period, a dataset a running writer holds the lease of.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from storekit.checkpoint.scan import COMPLETE, RunScan, scan_area_run
from storekit.errors import StorekitError, UsageError
from storekit.layout.spec import AreaSpec, LayoutSpec
from storekit.lease import binding_lease, sibling_lease_path
from storekit.store import Store
from storekit.stubs import Stub, is_stub_name, parse_stub, unit_rel_of
from storekit.units import format_duration

ARCHIVED = "archived"  # a stub stands where the unit was


@dataclass(frozen=True, kw_only=True)
class Candidate:
    path: str  # tier-relative
    unit_kind: str  # checkpoint | dataset
    run: str | None  # the run directory (checkpoints)
    writer: str | None = None
    step: int | None = None
    state: str  # complete | incomplete | in-progress | archived
    reason: str  # the writer's rule met, or what is missing
    bytes: int = 0
    files: int = 0
    newest_mtime: float | None = None
    is_file: bool = False
    is_temp: bool = False
    protect: str | None = None  # why it may be copied but never freed
    rank: int | None = None  # among the run's complete checkpoints, 0 = newest
    run_newest_mtime: float | None = None  # newest change anywhere in the run (run state)
    stub: Stub | None = None

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)


def in_scope(path: str, globs: Sequence[str]) -> bool:
    """`path` or one of its ancestors matches a glob (no globs: everything is in scope)."""
    if not globs:
        return True
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(fnmatch.fnmatchcase(p, g) for g in globs for p in prefixes)


def _may_hold(prefix: str, globs: Sequence[str]) -> bool:
    """Can anything below directory `prefix` be in scope? Prunes the walk to the paths asked for."""
    if not globs or in_scope(prefix, globs):
        return True
    depth = prefix.count("/") + 1
    return any(fnmatch.fnmatchcase(prefix, "/".join(g.split("/")[:depth])) for g in globs)


def area_of(spec: LayoutSpec, name: str) -> AreaSpec:
    area = spec.area(name)
    if area is None:
        raise UsageError(f"layout {spec.name} has no area {name!r} ({', '.join(a.name for a in spec.areas)})")
    return area


def discover(
    store: Store, spec: LayoutSpec, area: AreaSpec, *, scope: Sequence[str] = (), now: float
) -> list[Candidate]:
    """Every unit (and stub) of `area` on `store` within `scope`, judged as of `now`."""
    if not store.exists(area.name):
        return []
    if area.writers:
        return [c for run in _level_dirs(store, area, scope) for c in _run_units(store, spec, area, run, now)]
    if area.levels and area.levels[-1].committed_by:
        return list(_datasets(store, spec, area, scope, now))
    raise UsageError(
        f"area {area.name} of layout {spec.name} holds no units",
        hint="units are checkpoints (an area with `writers`) or committed datasets (`committed_by`)",
    )


def _level_dirs(
    store: Store, area: AreaSpec, scope: Sequence[str], depth: int | None = None
) -> Iterator[str]:
    """Directories at the area's last level (runs, dataset versions' parents) that scope can reach."""
    levels = area.levels[: len(area.levels) if depth is None else depth]
    frontier = [area.name]
    for level in levels:
        nxt: list[str] = []
        for parent in frontier:
            for e in store.list(parent):
                if e.is_dir and not e.is_link and level.matches(e.name) and _may_hold(e.path, scope):
                    nxt.append(e.path)
        frontier = nxt
    yield from frontier


def _run_units(store: Store, spec: LayoutSpec, area: AreaSpec, run: str, now: float) -> list[Candidate]:
    scan = scan_area_run(store, run, area, temp=spec.temp_patterns, now=now)
    out = [
        _stub_candidate(store, p, "checkpoint", run)
        for p in scan.beside
        if is_stub_name(posixpath.basename(p))
    ]
    complete = list(reversed(scan.complete()))  # newest first
    rank = {u.name: i for i, u in enumerate(complete)}
    run_newest = max((u.newest_mtime for u in scan.units if u.newest_mtime is not None), default=None)
    for u in scan.units:
        out.append(
            Candidate(
                path=u.path,
                unit_kind="checkpoint",
                run=run,
                writer=u.writer,
                step=u.step,
                state=u.state,
                reason=u.reason,
                bytes=u.bytes,
                files=u.files,
                newest_mtime=u.newest_mtime,
                is_file=u.is_file,
                is_temp=u.is_temp,
                protect=_protect(u.name, u.newest_mtime, scan, area, now),
                rank=rank.get(u.name),
                run_newest_mtime=run_newest,
            )
        )
    return out


def _protect(name: str, newest: float | None, scan: RunScan, area: AreaSpec, now: float) -> str | None:
    latest = scan.latest()
    if latest is not None and latest.name == name:
        return "the newest complete checkpoint of its run"
    named = [t for t, unit in scan.pointers.items() if unit == name]
    if named:
        return f"named by {posixpath.basename(named[0])}"
    return _quiet(newest, area, now)


def _quiet(newest: float | None, area: AreaSpec, now: float) -> str | None:
    if newest is None or now - newest >= area.quiet_seconds:
        return None
    return f"changed {format_duration(max(0.0, now - newest))} ago, within the quiet period"


def _stub_candidate(store: Store, path: str, kind: str, run: str | None) -> Candidate:
    unit = unit_rel_of(path)
    try:
        stub: Stub | None = parse_stub(store.read_bytes(path), f"{store.display_url}/{path}")
        reason = f"{stub.done_verb} to tier {stub.to_tier}" if stub else ""
    except StorekitError as exc:
        stub, reason = None, exc.message
    return Candidate(
        path=unit,
        unit_kind=kind,
        run=run,
        state=ARCHIVED,
        reason=reason,
        bytes=stub.bytes if stub else 0,
        files=stub.files if stub else 0,
        writer=stub.writer if stub else None,
        step=stub.step if stub else None,
        is_file=stub.is_file if stub else False,
        stub=stub,
    )


def _datasets(
    store: Store, spec: LayoutSpec, area: AreaSpec, scope: Sequence[str], now: float
) -> Iterator[Candidate]:
    last = area.levels[-1]
    for parent in _level_dirs(store, area, scope, depth=len(area.levels) - 1):
        for e in store.list(parent):
            if is_stub_name(e.name) and in_scope(unit_rel_of(e.path), scope):
                yield _stub_candidate(store, e.path, "dataset", None)
                continue
            if not e.is_dir or e.is_link or not last.matches(e.name) or not in_scope(e.path, scope):
                continue
            yield _dataset(store, area, e.path, last.committed_by or "", now)


def _dataset(store: Store, area: AreaSpec, path: str, marker: str, now: float) -> Candidate:
    files, size, newest = 0, 0, None
    for sub in store.scan(path):
        if sub.mtime_ns:
            newest = max(newest or 0.0, sub.mtime_ns / 1e9)
        if not sub.is_dir:
            files, size = files + 1, size + sub.size
    committed = store.exists(posixpath.join(path, marker))
    protect = _quiet(newest, area, now)
    local = store.local_path(path)
    if local is not None:
        lease = binding_lease(sibling_lease_path(Path(local)))
        if lease is not None:
            protect = f"a run holds its lease ({lease.describe()})"
    return Candidate(
        path=path,
        unit_kind="dataset",
        run=None,
        state=COMPLETE if committed else "incomplete",
        reason=f"{marker} present" if committed else f"no {marker}: not committed",
        bytes=size,
        files=files,
        newest_mtime=newest,
        protect=protect,
    )
