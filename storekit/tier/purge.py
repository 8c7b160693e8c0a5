"""Purge: free a unit whose copy on another tier is committed and verified; nothing is copied.

A purge never writes to the destination. The copy counts only when its manifest is there (present =
committed) and describes the source exactly: the same entries, types, sizes, modes, mtimes and link
targets, and the source's bytes hash to the manifest's xxh3-128 digests (a source rewritten since it
was copied is not purged). The copy itself is verified either by reading every file back now or, when
the rule sets `verify_max_age`, by a recorded verification of that very manifest within that age
(storekit.tier.verified). Only then is the unit journaled as `committed` and freed the mover's way:
stub beside it, fingerprint checked once more, removed through a tombstone.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from storekit.config import TierConfig
from storekit.errors import MismatchError
from storekit.manifest import UnitEntry, manifest_digest, parse_unit_manifest
from storekit.ops.s3transfer import TransferConfig
from storekit.store import Store
from storekit.tier.dest import Destination, open_destination
from storekit.tier.mover import (
    UnitChanged,
    UnitInfo,
    UnitResult,
    free_committed,
    moved_stub,
    source_root,
    tier_store,
    unit_leased,
)
from storekit.tier.relpath import check_rel
from storekit.tier.samecopy import differs as copy_differs
from storekit.tier.unitjournal import UnitJournal, log_action, unit_id
from storekit.tier.unitwalk import fingerprint, walk_unit
from storekit.tier.verified import record_failed, record_verified, verified_at
from storekit.units import format_duration


class NoVerifiedCopy(UnitChanged):
    """No committed copy, or one that is not this source: the unit is skipped, nothing freed."""


def destination(
    tier: TierConfig | Store, to_path: str, *, tag: str, transfer: TransferConfig | None
) -> Destination:
    """The copy of a unit at `to_path` on `tier`, to read (never to write)."""
    return open_destination(tier_store(tier), to_path, temp_tag=tag, config=transfer)


def purge_unit(
    src_root: Path | Store,
    unit_rel: str,
    dst: TierConfig | Store,
    *,
    journal_dir: Path,
    dst_rel: str | None = None,
    verify_max_age_s: float | None = None,
    info: UnitInfo | None = None,
    transfer: TransferConfig | None = None,
    now: float | None = None,
) -> UnitResult:
    """Free `src_root/unit_rel` if its copy at `dst_rel` on `dst` is committed, is this unit, and is
    verified (read back now, or within `verify_max_age_s`); NoVerifiedCopy (skipped) otherwise."""
    src = source_root(src_root, unit_rel, "purge: unit path") / unit_rel
    store = tier_store(dst)
    to_path = check_rel(dst_rel or unit_rel, f"purge against tier {store.name}: path")
    uid = unit_id("purge", str(src), f"{store.name}:{to_path}")
    dest = destination(store, to_path, tag=f"purge-{uid}", transfer=transfer)
    journal = UnitJournal(journal_dir, uid)
    try:
        with unit_leased("purge", src, journal) as resumed:
            if not resumed:
                stub = moved_stub(src)
                if stub is not None:
                    return _already(unit_rel, dest, stub.manifest_xxh3, stub.bytes, stub.files)
                entries, data = _verified_copy(src, dest, journal, verify_max_age_s, now)
                journal.save_manifest(data)
                journal.advance(  # the first durable step: before it, a purge has changed nothing
                    "committed",
                    action="purge",
                    stub_action="archive" if store.tier.role == "archive" else "drain",
                    source=str(src),
                    unit=unit_rel,
                    dest=dest.url,
                    tier=store.name,
                    to_path=to_path,
                    free_source=True,
                    info=dataclasses.asdict(info or UnitInfo()),
                    fingerprint=fingerprint(entries),
                    manifest_xxh3_128=manifest_digest(data),
                )
            return free_committed("purge", src, unit_rel, journal, dest, resumed)
    finally:
        dest.close()


def _verified_copy(
    src: Path, dest: Destination, journal: UnitJournal, max_age: float | None, now: float | None
) -> tuple[list[UnitEntry], bytes]:
    data = dest.manifest()
    if data is None:
        raise NoVerifiedCopy(f"{src}: no committed copy at {dest.manifest_url}; not purged")
    manifest = parse_unit_manifest(data, dest.manifest_url)
    entries = walk_unit(src)
    differs = copy_differs(src, entries, manifest)
    if differs is not None:
        raise NoVerifiedCopy(f"{src}: not the unit copied to {dest.url} ({differs}); not purged")
    digest = manifest_digest(data)
    stamp = dest.stamp(manifest.files)  # before any reading: a copy changed during it differs after
    when = verified_at(journal.dir, dest.manifest_url, digest, stamp) if max_age is not None else None
    age = (time.time() if now is None else now) - when if when is not None else None
    if max_age is not None and age is not None and age <= max_age:
        how = f"verified {format_duration(max(0.0, age))} ago (verify_max_age {format_duration(max_age)})"
    else:
        problems = dest.readback(manifest.files)
        if problems:  # evidence: every earlier verification of this copy is void from now on
            record_failed(journal.dir, dest.manifest_url, problems[0])
            raise MismatchError(
                f"{dest.url}: the copy does not read back as its manifest says ({problems[0]}; "
                f"{len(problems)} in all); {src} not purged",
                hint="storekit tier verify names every problem; archive the unit again",
            )
        record_verified(journal.dir, dest.manifest_url, digest, stamp=stamp)
        how = "read back now"
    log_action(journal.dir, "purge.verified", journal.id, source=str(src), copy=dest.url, how=how)
    return entries, data


def _already(unit_rel: str, dest: Destination, digest: str, size: int, files: int) -> UnitResult:
    return UnitResult(
        path=unit_rel,
        action="purge",
        state="already-moved",
        files=files,
        bytes=size,
        dest_url=dest.url,
        manifest_xxh3_128=digest,
        resumed=False,
        freed=True,
    )
