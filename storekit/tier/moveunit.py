"""The entry point a reviewed plan's `--apply` calls for each unit: `move_unit(unit, site=...)`.

`unit` is a plan unit (storekit.tier.plan.PlanUnit: action, src_tier, src_path, dst_tier, dst_path,
free_source, unit_kind, writer, step); the moves themselves are storekit.tier.mover's, and so is the
result (mover.UnitResult, with the reason `tier --apply` reports filled in). The unit
journals live on a shared tier: `$STOREKIT_TIER_JOURNAL`, else `.storekit-tier-journal/` in the
root of the first POSIX tier that is not node-local (role burst).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from storekit.config import SiteConfig
from storekit.errors import StorekitError, UsageError
from storekit.ops.s3transfer import tier_bucket_prefix
from storekit.store import open_store
from storekit.tier.mover import (
    UnitChanged,
    UnitInfo,
    UnitResult,
    archive_unit,
    drain_unit,
    recall_unit,
    tier_root,
)
from storekit.tier.relpath import check_rel
from storekit.tier.unitjournal import UnitJournal, unit_id

JOURNAL_ENV = "STOREKIT_TIER_JOURNAL"
JOURNAL_DIR = ".storekit-tier-journal"


def journal_dir_for(site: SiteConfig) -> Path:
    where = os.environ.get(JOURNAL_ENV)
    if where:
        return Path(where)
    for tier in site.tiers.values():
        if tier.scheme == "file" and tier.role != "burst":
            return tier_root(tier) / JOURNAL_DIR
    raise UsageError(
        "no shared POSIX tier for the tier journal",
        hint=f"configure a tier of role parallel (or plain), or set {JOURNAL_ENV}",
    )


def unit_journal(unit: Any, *, site: SiteConfig) -> UnitJournal:
    """The journal a move of plan unit `unit` keeps (named as archive_unit, drain_unit, recall_unit
    and purge_unit name it): what a rerun of an interrupted move finds."""
    journal = journal_dir_for(site)
    if unit.action == "recall":
        target = tier_root(site.tier(unit.dst_tier)) / unit.dst_path
        return UnitJournal(journal, unit_id("recall", str(target), ""))
    src = str(tier_root(site.tier(unit.src_tier)) / unit.src_path)
    dst = site.tier(unit.dst_tier)
    if unit.action == "purge":
        return UnitJournal(journal, unit_id("purge", src, f"{dst.name}:{unit.dst_path}"))
    if dst.scheme == "s3":
        bucket, prefix = tier_bucket_prefix(dst)
        url = f"s3://{bucket}/{prefix}/{unit.dst_path}".replace(f"s3://{bucket}//", f"s3://{bucket}/")
        return UnitJournal(journal, unit_id(unit.action, src, url))
    return UnitJournal(journal, unit_id(unit.action, src, (tier_root(dst) / unit.dst_path).as_uri()))


def move_unit(unit: Any, *, site: SiteConfig) -> UnitResult:
    """Carry out one plan unit; a unit that changed under the move is skipped (its copy rolled back
    or, once committed, kept without freeing the source)."""
    journal = journal_dir_for(site)
    check_rel(unit.src_path, f"{unit.action} of tier {unit.src_tier} path")
    check_rel(unit.dst_path, f"{unit.action} to tier {unit.dst_tier} path")
    info = UnitInfo(unit_kind=unit.unit_kind, writer=unit.writer, step=unit.step)
    # the unit's tier is this node's own (burst): another host's journal for its path is not its
    local = site.tier(unit.dst_tier if unit.action == "recall" else unit.src_tier).role == "burst"
    try:
        if unit.action == "archive":
            src = open_store(site.tier(unit.src_tier))  # paths checked through the tier's store
            dst = site.tier(unit.dst_tier)
            r = archive_unit(
                src, unit.src_path, dst, journal_dir=journal, free_source=unit.free_source, info=info,
                dst_rel=unit.dst_path, node_local=local,
            )  # fmt: skip
        elif unit.action == "drain":
            src = open_store(site.tier(unit.src_tier))
            r = drain_unit(
                src, unit.src_path, site.tier(unit.dst_tier), journal_dir=journal,
                free_source=unit.free_source, info=info, dst_rel=unit.dst_path, node_local=local,
            )  # fmt: skip
        elif unit.action == "recall":
            r = recall_unit(
                open_store(site.tier(unit.dst_tier)), unit.dst_path, journal_dir=journal, site=site,
                node_local=local,
            )  # fmt: skip
        elif unit.action == "purge":
            from storekit.tier.purge import purge_unit

            r = purge_unit(
                open_store(site.tier(unit.src_tier)), unit.src_path, site.tier(unit.dst_tier),
                journal_dir=journal, dst_rel=unit.dst_path, info=info,
                verify_max_age_s=getattr(unit, "verify_max_age_s", None),
            )  # fmt: skip
        else:
            raise StorekitError(f"{unit.src_path}: the mover cannot {unit.action}")
    except UnitChanged as exc:
        where = unit.dst_path if unit.action == "recall" else unit.src_path
        return UnitResult(
            path=where, action=unit.action, status="skipped", reason=exc.message, exit_code=int(exc.exit_code)
        )
    why = "copied and verified; source kept" if not r.freed and r.action != "recall" else r.state
    if r.action == "purge" and r.state == "done":
        why = "freed: its copy is committed, the same bytes, and verified"
    if r.not_owned:  # the copy belongs to whoever ran the move: say so, never silently
        why += f"; owner and group not restored for {len(r.not_owned)} entries (run as root to keep them)"
    return dataclasses.replace(r, reason=why)
