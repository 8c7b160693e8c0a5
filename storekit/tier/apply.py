"""Carry out exactly a plan: each unit fingerprinted again right before it moves, then handed to the mover.

A unit whose fingerprint differs from the plan's (a file added, removed, rewritten or touched) is
skipped with what changed. A unit the plan frees is judged again first: if it has become one that may
never be freed (a tracker now names it), it is skipped. Moving one unit — journal, copy, verify,
commit, stub, free — is `storekit.tier.moveunit.move_unit` (over storekit.tier.mover), which this
module only calls; every unit's outcome is a mover.UnitResult.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from storekit.config import SiteConfig
from storekit.errors import ExitCode, NotFoundError, StorekitError, storage_error
from storekit.layout.spec import load_layout
from storekit.lease import Lease
from storekit.rootprobe import guard_root
from storekit.store import Store, open_store
from storekit.stubs import stub_rel
from storekit.tier.candidates import area_of, discover
from storekit.tier.fingerprint import fingerprint_of
from storekit.tier.mover import UnitResult
from storekit.tier.moveunit import move_unit
from storekit.tier.plan import PlanUnit, TierPlan, with_stats

DRAIN_LOCK = ".storekit-tier-drain.storekit-lease"  # in the burst tier's root: one drain per node
Mover = Callable[..., Any]  # move_unit, or a stand-in a test hands over


def check_unit(
    plan: TierPlan, unit: PlanUnit, stores: dict[str, Store], *, now: float
) -> UnitResult | PlanUnit:
    """The unit as it is now, with its fresh stats for the mover, or why it is skipped."""
    store = _store(stores, plan, unit)
    where = stub_rel(unit.dst_path) if unit.action == "recall" else unit.src_path
    try:
        stats = fingerprint_of(store, where)
    except NotFoundError:
        return _skip(unit, "gone since the plan was made")
    if stats.digest != unit.fingerprint:
        if unit.stats is not None:
            changed = ", ".join(unit.stats.differences(stats))
        else:
            changed = f"{stats.file_count} files, {stats.bytes} bytes now"
        return _skip(unit, f"changed since the plan ({changed})")
    if unit.free_source and unit.action != "recall":
        why = _now_protected(plan, unit, store, now)
        if why is not None:
            return _skip(unit, f"no longer may be freed: {why}")
    return with_stats(unit, stats)


def _now_protected(plan: TierPlan, unit: PlanUnit, store: Store, now: float) -> str | None:
    spec = load_layout(store.tier.layout)
    area = area_of(spec, str(plan.policy.get("area", "checkpoints")))
    found = [
        c for c in discover(store, spec, area, scope=(unit.src_path,), now=now) if c.path == unit.src_path
    ]
    if not found:
        return "no longer a unit of its area"
    c = found[0]
    if c.state != "complete":
        return f"{c.state}: {c.reason}"
    return c.protect


def _store(stores: dict[str, Store], plan: TierPlan, unit: PlanUnit) -> Store:
    name = unit.dst_tier if unit.action == "recall" else unit.src_tier
    return stores[name]


def _skip(unit: PlanUnit, reason: str) -> UnitResult:
    path = unit.src_path if unit.action != "recall" else unit.dst_path
    return UnitResult(path=path, action=unit.action, status="skipped", reason=reason)


def apply_plan(
    plan: TierPlan,
    site: SiteConfig,
    *,
    mover: Mover = move_unit,
    on_unit: Callable[[UnitResult], None] | None = None,
) -> list[UnitResult]:
    """Every unit of the plan in order; a failed unit does not stop the others."""
    stores = plan_stores(plan, site)
    results: list[UnitResult] = []
    with _drain_lock(plan, stores):
        for unit in plan.units:
            result = apply_unit(plan, unit, site, stores, mover=mover)
            results.append(result)
            if on_unit is not None:
                on_unit(result)
    return results


def plan_stores(plan: TierPlan, site: SiteConfig) -> dict[str, Store]:
    """The stores the plan's units are checked on, once every tier it names answers (a shared tier
    whose metadata server stalls is exit 5, not a hang)."""
    stores = {name: open_store(site.tier(name)) for name in _tiers(plan)}
    for name in sorted({t for u in plan.units for t in (u.src_tier, u.dst_tier)}):
        root = site.tier(name).local_root
        if root is not None:
            guard_root(root, name)
    return stores


def apply_unit(
    plan: TierPlan,
    unit: PlanUnit,
    site: SiteConfig,
    stores: dict[str, Store],
    *,
    mover: Mover = move_unit,
    check: bool = True,
) -> UnitResult:
    """One unit of the plan: checked again, then moved (or why not). `check=False`: a move of it
    that was interrupted is resumed from its journal (the mover checks the unit against that)."""
    checked = check_unit(plan, unit, stores, now=time.time()) if check else unit
    return checked if isinstance(checked, UnitResult) else _move(mover, checked, site)


def _move(mover: Mover, unit: PlanUnit, site: SiteConfig) -> UnitResult:
    path = unit.dst_path if unit.action == "recall" else unit.src_path
    try:
        out = mover(unit, site=site)
    except StorekitError as exc:
        return UnitResult(
            path=path, action=unit.action, status="failed", reason=exc.message, exit_code=int(exc.exit_code)
        )
    except OSError as exc:  # a read-only or vanished tier under one unit: that unit fails, in one line
        err = storage_error(exc, str(exc.filename) if exc.filename else path)
        if err is None:
            raise
        return UnitResult(
            path=path, action=unit.action, status="failed", reason=err.message, exit_code=int(err.exit_code)
        )
    return out if isinstance(out, UnitResult) else UnitResult(path=path, action=unit.action, bytes=unit.bytes)


def _tiers(plan: TierPlan) -> set[str]:
    return {u.dst_tier if u.action == "recall" else u.src_tier for u in plan.units}


@contextlib.contextmanager
def _drain_lock(plan: TierPlan, stores: dict[str, Store]) -> Iterator[None]:
    """One drain at a time per node: a lease in the node-local tier's root (not flock: see lease.py)."""
    burst = [stores[n] for n in plan.node_local if n in stores and plan.action == "drain"]
    local = burst[0].local_path("") if burst else None
    if local is None:
        yield
        return
    with Lease(Path(local) / DRAIN_LOCK, purpose="storekit tier --drain"):
        yield


def exit_code_of(results: list[UnitResult]) -> int:
    """0 when nothing failed (skips are reported, not errors); else the first failure's code."""
    failed = [r.exit_code or int(ExitCode.ERROR) for r in results if r.status == "failed"]
    return failed[0] if failed else 0
