"""Moving one unit: archive (POSIX -> S3), drain (POSIX -> POSIX), recall (back from either).

Every move is journaled (storekit.tier.unitjournal) and runs under the unit's lease
(`.NAME.storekit-lease` beside it, storekit.lease: no flock). The order never changes:

    planned    the unit's fingerprint (size, mtime_ns, ctime_ns, inode of every entry) recorded
    copying    files copied, each hashed (xxh3-128) in the reading pass; every finished batch read
               back from the destination while the next one is copied
    copied     all bytes sent; the manifest (digests from the reading pass) kept in the journal
    verified   every byte read back equals what was read from the source
    committed  the manifest is on the destination (present = complete; uploaded last)
    stubbed    `<unit>.storekit-stub` written beside the source (only if the source is to be freed)
    freed      the source removed through a tombstone, after checking its fingerprint once more

A rerun after a kill anywhere resumes from the last durable step. Before `committed` nothing on the
destination counts; the source is touched only after `committed`, and never if it changed since
`planned` (UnitChanged). A recall fetches into a temp sibling, checks every byte and entry against
the manifest, restores modes and mtimes, renames into place, then removes the stub.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import socket
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from storekit import faults
from storekit.config import SiteConfig, TierConfig, mask_url
from storekit.durable import TMP_MARK, fsync_dir, purge_tombstones, remove_tree
from storekit.errors import (
    BusyError,
    MismatchError,
    NoSpaceError,
    NotFoundError,
    StorekitError,
    UsageError,
    storage_error,
)
from storekit.lease import Lease, sibling_lease_path
from storekit.manifest import (
    FILE,
    UNIT_MANIFEST_SUFFIX,
    UnitEntry,
    UnitManifest,
    manifest_digest,
    parse_unit_manifest,
)
from storekit.ops.journal import FileUploadJournal
from storekit.ops.s3transfer import TransferConfig
from storekit.places import posix_tiers_holding
from storekit.store import Store, open_store
from storekit.stubs import STUB_SUFFIX, Stub
from storekit.tier.dest import (
    Destination,
    PosixDestination,
    check_space,
    materialize,
    open_destination,
    unit_url,
)
from storekit.tier.relpath import check_rel
from storekit.tier.samecopy import differs as copy_differs
from storekit.tier.stubfile import read_stub, stub_path, write_stub
from storekit.tier.unitjournal import UnitJournal, log_action, unit_id
from storekit.tier.unitwalk import fingerprint, walk_unit
from storekit.tier.verified import record_failed, record_verified


class UnitChanged(StorekitError):
    """The unit changed since it was planned or copied: it is not freed (exit 1)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class UnitResult:
    """What became of one unit: the mover's record of a move and the line `tier --apply` reports
    (a unit the plan's re-check skipped, or whose move failed, has only the first six fields)."""

    path: str  # the unit, relative to its tier root
    action: str  # archive | drain | recall | purge
    status: str = "done"  # done | skipped | failed
    reason: str = ""  # why it was skipped or failed; for a move done, what was done
    bytes: int = 0
    exit_code: int = 0  # a failed unit's (storekit.errors.ExitCode)
    state: str = "done"  # of a move done: done | already-moved | already-present
    files: int = 0
    dest_url: str = ""
    manifest_xxh3_128: str = ""
    resumed: bool = False  # a journal of an earlier, interrupted run was found and finished
    freed: bool = False  # the source was removed (archive/drain) or the stub (recall)
    not_owned: tuple[str, ...] = ()  # entries written without their recorded owner (not root)
    # wall seconds per phase of a move this run made (plan, copy, read_back, commit, free): where
    # the time went, in --json and the log line; empty when nothing was moved
    phases: dict[str, float] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class PhaseTimer:
    """Laps of one move. `copy` ends when every byte was sent (the manifest is recorded then);
    `read_back` is what the read-back still took after that (it runs beside the copy)."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self._since = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self._since, 3)
        self._since = now


@dataclasses.dataclass(frozen=True, kw_only=True)
class UnitInfo:
    """What the stub says about the unit besides where it went (from the plan's scan)."""

    unit_kind: str = "checkpoint"  # checkpoint | dataset
    writer: str | None = None
    step: int | None = None


def tier_root(tier: TierConfig) -> Path:
    """The local directory of a POSIX tier."""
    if tier.local_root is None:
        raise StorekitError(f"tier {tier.name} is not a POSIX tier ({mask_url(tier.url)})")
    return Path(tier.local_root)


def tier_store(tier: TierConfig | Store) -> Store:
    """The destination tier's one Store instance (a caller that holds it passes it)."""
    return tier if isinstance(tier, Store) else open_store(tier)


def source_root(src: Path | Store, unit_rel: str, what: str) -> Path:
    """The root of the POSIX tier a unit is moved from (or recalled to), through that tier's store:
    `unit_rel` must be a plain path inside it (check_rel) and no symlink on its way may lead out of
    the tier's root. A directory swapped for such a link after the plan was made would otherwise
    have the move read another tree's files, and then free them (PathEscapeError, exit 2). `src` is
    the tier's store, or the root directory itself (the store is then opened on it)."""
    check_rel(unit_rel, what)
    store = src if isinstance(src, Store) else open_store(TierConfig(name=str(src), url=src.as_uri()))
    root = store.local_path("")
    if root is None:
        raise StorekitError(f"tier {store.name} is not a POSIX tier ({store.display_url})")
    store.local_path(unit_rel)  # refuses a path that resolves outside the root
    return Path(root)


def archive_unit(
    src: Path | Store,
    unit_rel: str,
    dst: TierConfig | Store,
    *,
    journal_dir: Path,
    free_source: bool = True,
    transfer: TransferConfig | None = None,
    info: UnitInfo | None = None,
    dst_rel: str | None = None,
    node_local: bool = False,
) -> UnitResult:
    """Copy the unit at `src_root/unit_rel` to the archive tier `dst` (at `dst_rel`, default the same
    relative path), verify every byte, commit the manifest, then (if `free_source`) leave a stub and
    free the source. An archive tier that is a POSIX directory takes the drain's way there."""
    src_root = source_root(src, unit_rel, "archive: unit path")
    store = tier_store(dst)
    if store.tier.scheme == "file":
        return _to_posix(
            "archive", src_root, unit_rel, store, journal_dir, free_source, info, dst_rel,
            node_local=node_local,
        )  # fmt: skip
    if store.tier.scheme != "s3":
        raise UsageError(
            f"tier {store.name} ({store.display_url}): units are archived to S3 buckets or POSIX directories"
        )
    to_path = check_rel(dst_rel or unit_rel, f"archive to tier {store.name}: path")
    dest_url = unit_url(store, to_path)
    journal = UnitJournal(journal_dir, unit_id("archive", str(src_root / unit_rel), dest_url))

    def make() -> Destination:
        uploads = FileUploadJournal(journal.uploads_path)
        return open_destination(store, to_path, journal=uploads, config=transfer)

    return _move(
        "archive", src_root, unit_rel, journal, make, dest_url, (dst.name, to_path), free_source, info,
        node_local=node_local,
    )  # fmt: skip


def drain_unit(
    src: Path | Store,
    unit_rel: str,
    dst: TierConfig | Store,
    *,
    journal_dir: Path,
    free_source: bool = True,
    info: UnitInfo | None = None,
    dst_rel: str | None = None,
    node_local: bool = False,
) -> UnitResult:
    """Copy the unit to the POSIX tier `dst` (at `dst_rel`, default the same relative path; a temp
    sibling, read back, renamed into place, manifest beside it), then (if `free_source`) stub and
    free the source. `node_local`: the source is on this node's burst tier (see unit_leased)."""
    src_root = source_root(src, unit_rel, "drain: unit path")
    return _to_posix(
        "drain", src_root, unit_rel, tier_store(dst), journal_dir, free_source, info, dst_rel,
        node_local=node_local,
    )  # fmt: skip


def posix_temp_tag(action: str, uid: str) -> str:
    """The copy's temp sibling is `.NAME.storekit-tmp-<tag>` (`tier gc` finds it from the journal)."""
    return f"{action}-{uid}"


def _to_posix(
    action: str,
    src_root: Path,
    unit_rel: str,
    store: Store,
    journal_dir: Path,
    free_source: bool,
    info: UnitInfo | None,
    dst_rel: str | None,
    *,
    node_local: bool = False,
) -> UnitResult:
    to_path = check_rel(dst_rel or unit_rel, f"{action} to tier {store.name}: path")
    if store.local_path("") is None:
        raise StorekitError(f"tier {store.name} is not a POSIX tier ({store.display_url})")
    here = PosixDestination(store, to_path, temp_tag="")  # paths only: nothing is written here
    journal = UnitJournal(journal_dir, unit_id(action, str(src_root / unit_rel), here.url))

    def make() -> Destination:
        tag = posix_temp_tag(action, journal.id)
        return open_destination(store, to_path, temp_tag=tag, replaces=str(journal.doc.get("replaces", "")))

    # a copy without a manifest, or a lone manifest, is nobody's committed copy: never replaced
    # (a committed one is judged under the lease: this unit's own older copy is replaced)
    has_manifest = os.path.lexists(here.manifest_path)
    if not journal.load(tidy=False) and os.path.lexists(here.dest) != has_manifest:  # read-only here
        raise StorekitError(f"{here.dest}: already exists on the destination; refusing to {action} over it")
    return _move(
        action, src_root, unit_rel, journal, make, here.url, (store.name, to_path), free_source, info,
        node_local=node_local,
    )  # fmt: skip


def _move(
    action: str,
    src_root: Path,
    unit_rel: str,
    journal: UnitJournal,
    make: Any,
    dest_url: str,
    to: tuple[str, str],  # (tier name, path on it)
    free_source: bool,
    info: UnitInfo | None,
    *,
    node_local: bool = False,
) -> UnitResult:
    src = src_root / unit_rel
    timer = PhaseTimer()
    with unit_leased(action, src, journal, node_local=node_local) as resumed:
        if not resumed:
            stub = moved_stub(src)
            if stub is not None:
                return _result(action, unit_rel, dest_url, stub, "already-moved", resumed=False, freed=True)
            entries = walk_unit(src)
            dest_check: Destination = make()
            try:
                dest_check.precheck()
                older = _refuse_another_units_copy(dest_check, src)
            finally:
                dest_check.close()
            journal.advance(
                "planned",
                action=action,
                source=str(src),
                unit=unit_rel,
                dest=dest_url,
                tier=to[0],
                to_path=to[1],
                free_source=free_source,
                info=dataclasses.asdict(info or UnitInfo()),
                fingerprint=fingerprint(entries),
                replaces=manifest_digest(older) if older is not None else "",  # this unit's older copy
            )
        dest: Destination = make()
        try:
            return _resume(action, src, unit_rel, journal, dest, resumed, timer)
        finally:
            dest.close()


def _refuse_another_units_copy(dest: Destination, src: Path) -> bytes | None:
    """A committed copy at the destination made from another source (two tiers holding the same
    relative path) may be the only copy a stub elsewhere names: never replaced. This unit's own
    older copy (archived, recalled, archived again) is: its manifest is returned."""
    data = dest.manifest()
    if data is None:
        return None
    try:
        source = parse_unit_manifest(data, dest.manifest_url).source
    except StorekitError:
        source = "an unreadable manifest"
    if source != src.as_uri():
        raise StorekitError(
            f"{dest.url} holds an archive of another unit ({source}), not of {src}; refusing to replace it",
            hint="archive to another path (a plan's dst_path), or remove that copy once nothing names it",
        )
    return data


@contextlib.contextmanager
def unit_leased(action: str, src: Path, journal: UnitJournal, *, node_local: bool = False) -> Iterator[bool]:
    """Hold the unit's lease, what a killed move left beside it tidied; yields whether `journal`
    resumes an earlier run (every move and purge starts here). On a node-local tier (`node_local`)
    a journal another host left for this path is that host's unit: never resumed here."""
    if not src.parent.is_dir():
        raise NotFoundError(f"{src}: no such unit")
    with Lease(sibling_lease_path(src), purpose=f"running tier {action} of {src}"):
        purge_tombstones(src.parent)  # a free that a kill interrupted
        remove_own_temps(src)
        resumed = journal.load()
        host = journal.doc.get("host") if resumed else None
        if node_local and isinstance(host, str) and host != socket.gethostname():
            raise BusyError(
                f"{src}: a {journal.doc.get('action', action)} of this path on host {host} is not "
                f"finished ({journal.path}); this node's unit there waits for it",
                hint=f"on {host}: rerun it, or run `storekit tier gc`; then rerun here",
            )
        yield resumed


def moved_stub(src: Path) -> Stub | None:
    """Before a new move of `src`: its stub when the unit moved already (nothing to do), None when the
    unit is here to move; an error when neither is there, or both."""
    stub = read_stub(stub_path(src))
    present = os.path.lexists(src)
    if stub is not None and not present:
        return stub
    if not present:
        raise NotFoundError(f"{src}: no such unit")
    if stub is not None:
        raise StorekitError(
            f"{src}: both the unit and its stub exist (a recall not finished?)",
            hint=f"run `storekit tier --recall {src}` to finish the recall first",
        )
    return None


def _resume(
    action: str,
    src: Path,
    unit_rel: str,
    journal: UnitJournal,
    dest: Destination,
    resumed: bool,
    timer: PhaseTimer | None = None,
) -> UnitResult:
    uid = journal.id
    jdir = journal.dir
    timer = timer or PhaseTimer()
    if journal.state in ("planned", "copying"):
        entries = _unchanged(src, journal, dest, "planned")
        journal.advance("copying")
        dest.clear()  # an older copy's manifest must never vouch for this one
        log_action(jdir, f"{action}.copy", uid, unit=unit_rel, source=str(src), dest=dest.url)
        timer.lap("plan")

        def copied(digests: dict[str, str]) -> None:
            """Every byte sent (read-back still going on): record the manifest from the reading pass."""
            _unchanged(src, journal, dest, "planned")  # a file touched during the copy fails the unit
            manifest = UnitManifest(
                unit=unit_rel,
                source=src.as_uri(),
                entries=[dataclasses.replace(e, xxh3_128=digests.get(e.path, "")) for e in entries],
            )
            data = manifest.to_json()
            journal.save_manifest(data)
            journal.advance("copied", manifest_xxh3_128=manifest_digest(data))
            log_action(jdir, f"{action}.copied", uid, bytes=manifest.total_bytes, files=len(manifest.files))
            timer.lap("copy")

        try:
            dest.copy(src, entries, copied)
        except NoSpaceError:  # nothing on the destination counts yet: gone, and so is the journal
            if journal.state == "copying":
                _roll_back_full(action, src, journal, dest, entries)
            raise
        except StorekitError:
            if journal.state == "copying":
                _unchanged(src, journal, dest, "planned")  # a file changed under the copy: roll back
            raise
        not_owned = list(getattr(dest, "not_owned", []))
        if not_owned:  # the mover is not root: the copy is the mover's, said here and in the result
            log_action(
                jdir, f"{action}.owners-not-restored", uid, entries=not_owned[:20], count=len(not_owned)
            )
        # copy returns only once every batch was read back and matched
        timer.lap("read_back")
        journal.advance("verified", not_owned=not_owned[:100])
        _log_verified(jdir, action, uid, _saved_manifest(journal)[0])
    manifest, data = _saved_manifest(journal)
    if journal.state == "copied":  # killed before the read-back finished: read everything back
        timer.lap("plan")
        problems = dest.readback(manifest.files)
        timer.lap("read_back")
        if problems:  # the copy is not what was read: copy again (an uncommitted copy counts for nothing)
            log_action(jdir, f"{action}.read-back-differs", uid, problems=problems[:10], count=len(problems))
            record_failed(jdir, dest.manifest_url, problems[0])
            journal.advance("copying")
            return _resume(action, src, unit_rel, journal, dest, resumed, timer)
        journal.advance("verified")
        _log_verified(jdir, action, uid, manifest)
    digest = manifest_digest(data)
    if journal.state == "verified":
        faults.point("tier.verified")
        try:
            dest.commit(data)
        except NoSpaceError:  # the tier filled up since the copy: nothing was renamed, none counts
            _roll_back_full(action, src, journal, dest, manifest.entries)
            raise
        journal.advance("committed")
        log_action(jdir, f"{action}.committed", uid, manifest=dest.manifest_url, manifest_xxh3_128=digest)
        # every byte was read back before the commit; the stamp says which copy that was
        record_verified(jdir, dest.manifest_url, digest, stamp=dest.stamp(manifest.files))
        timer.lap("commit")
    return free_committed(action, src, unit_rel, journal, dest, resumed, timer)


def free_committed(
    action: str,
    src: Path,
    unit_rel: str,
    journal: UnitJournal,
    dest: Destination,
    resumed: bool,
    timer: PhaseTimer | None = None,
) -> UnitResult:
    """From `committed` on: stub the source and free it (unless the move keeps it), each step
    journaled; a source changed since `planned` is kept and loses its stub (UnitChanged)."""
    uid, jdir = journal.id, journal.dir
    manifest, data = _saved_manifest(journal)
    digest = manifest_digest(data)
    if journal.state == "committed":
        if not journal.doc.get("free_source", True):
            log_action(jdir, f"{action}.kept-source", uid, reason="copy only (not to be freed)")
            journal.finish()
            return _done(
                action, unit_rel, dest.url, manifest, digest, resumed, freed=False,
                not_owned=journal.doc.get("not_owned", ()), timer=timer,
            )  # fmt: skip
        _unchanged(src, journal, dest, "committed")
        stub = _new_stub(src, journal, action, manifest, digest)
        write_stub(src, stub)
        faults.point("tier.stub-written")
        journal.advance("stubbed", stub=dataclasses.asdict(stub))
    if journal.state == "stubbed":
        # the stub must stand before the source goes, whatever happened to it since (a kill, a hand)
        _ensure_stub(src, journal, action, manifest, digest)
        if os.path.lexists(src):
            _unchanged(src, journal, dest, "committed")
            remove_tree(src)
            faults.point("tier.source-removed")
        journal.advance("freed")
        log_action(jdir, f"{action}.freed", uid, source=str(src), bytes=manifest.total_bytes)
        if timer is not None:
            timer.lap("free")
    journal.finish()
    return _done(
        action, unit_rel, dest.url, manifest, digest, resumed, freed=True,
        not_owned=journal.doc.get("not_owned", ()), timer=timer,
    )  # fmt: skip


def _new_stub(src: Path, journal: UnitJournal, action: str, manifest: UnitManifest, digest: str) -> Stub:
    info = UnitInfo(**journal.doc.get("info", {}))
    return Stub(
        unit=src.name,
        unit_kind=info.unit_kind,
        is_file=os.path.isfile(src) and not os.path.islink(src),
        writer=info.writer,
        step=info.step,
        action=str(journal.doc.get("stub_action", action)),  # a purge says where the copy came from
        to_tier=str(journal.doc["tier"]),
        to_path=str(journal.doc["to_path"]),
        manifest=str(journal.doc["to_path"]) + UNIT_MANIFEST_SUFFIX,
        manifest_xxh3=digest,
        bytes=manifest.total_bytes,
        files=len(manifest.files),
        at=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        dirs=manifest.dirs,
        unit_id=journal.id,
    )


def _ensure_stub(src: Path, journal: UnitJournal, action: str, manifest: UnitManifest, digest: str) -> None:
    """Rewrite the journaled stub when the one beside the unit is missing or is not this move's."""
    try:
        there = read_stub(stub_path(src))
    except StorekitError:
        there = None
    if there is not None and (there.manifest_xxh3, there.unit_id) == (digest, journal.id):
        return
    saved = journal.doc.get("stub")
    stub = Stub(**saved) if isinstance(saved, dict) else _new_stub(src, journal, action, manifest, digest)
    write_stub(src, stub)
    log_action(journal.dir, f"{action}.stub-rewritten", journal.id, stub=str(stub_path(src)))


def remove_own_temps(unit: Path) -> None:
    """Temps of the stub's or a sibling manifest's atomic write that a crash left (we hold the lease)."""
    prefixes = tuple(f".{unit.name}{suffix}{TMP_MARK}" for suffix in (STUB_SUFFIX, UNIT_MANIFEST_SUFFIX))
    for name in os.listdir(unit.parent):
        if name.startswith(prefixes):
            remove_tree(unit.parent / name)


def _unchanged(src: Path, journal: UnitJournal, dest: Destination, since: str) -> list[UnitEntry]:
    """The unit's entries, if its fingerprint is the planned one; else roll back and raise."""
    entries = walk_unit(src) if os.path.lexists(src) else []
    if fingerprint(entries) == journal.doc["fingerprint"]:
        return entries
    if since == "planned":
        # nothing on the destination counts yet: remove it all (what was planned, what is there now,
        # what else the move wrote under the copy's name), so no orphan stays behind
        left = dest.discard(_planned_files(journal) + entries)
        log_action(journal.dir, "unit.changed", journal.id, source=str(src), rolled_back=True, left=left)
        journal.finish()
        gone = "" if os.path.lexists(src) else " (the source is gone)"
        kept = (
            f"left on the destination: {', '.join(left[:3])}" if left else "nothing left on the destination"
        )
        raise UnitChanged(
            f"{src}: changed since it was planned{gone}; the copy at {dest.url} was rolled back, "
            f"{kept}; nothing freed"
        )
    log_action(journal.dir, "unit.changed", journal.id, source=str(src), rolled_back=False)
    spath = stub_path(src)
    if spath.exists():  # the source stays the truth: a stub beside it would say it moved
        spath.unlink()
        fsync_dir(src.parent)
    journal.finish()
    raise UnitChanged(
        f"{src}: changed after its copy was committed ({dest.url}); the source was kept, not freed",
        hint="plan it again: the next archive replaces the copy",
    )


def _roll_back_full(
    action: str, src: Path, journal: UnitJournal, dest: Destination, entries: Sequence[UnitEntry]
) -> None:
    """A destination that ran out of space before the commit: its copy goes, and so does the journal."""
    dest.discard(_planned_files(journal) + list(entries))
    where = {"source": str(src), "dest": dest.url}
    log_action(journal.dir, f"{action}.no-space", journal.id, **where, rolled_back=True)
    journal.finish()


def _planned_files(journal: UnitJournal) -> list[UnitEntry]:
    """The files the journal's fingerprint lists (what the copy was to hold)."""
    return [
        UnitEntry(path=str(path), type=FILE, mode=0, mtime_ns=0)
        for path, kind, *_ in journal.doc.get("fingerprint", [])
        if kind == FILE
    ]


def _saved_manifest(journal: UnitJournal) -> tuple[UnitManifest, bytes]:
    data = journal.saved_manifest()
    if data is None or manifest_digest(data) != journal.doc.get("manifest_xxh3_128"):
        raise MismatchError(
            f"{journal.manifest_path}: missing or not the journaled manifest", hint="see `tier gc`"
        )
    return parse_unit_manifest(data, str(journal.manifest_path)), data


def _log_verified(jdir: Path, action: str, uid: str, manifest: UnitManifest) -> None:
    log_action(
        jdir,
        f"{action}.verified",
        uid,
        bytes=manifest.total_bytes,
        files={e.path: e.xxh3_128 for e in manifest.files},
    )


def _done(
    action: str,
    unit_rel: str,
    url: str,
    m: UnitManifest,
    digest: str,
    resumed: bool,
    *,
    freed: bool,
    not_owned: Any = (),
    timer: PhaseTimer | None = None,
) -> UnitResult:
    return UnitResult(
        phases=dict(timer.phases) if timer is not None else {},
        not_owned=tuple(str(p) for p in not_owned),
        path=unit_rel,
        action=action,
        state="done",
        files=len(m.files),
        bytes=m.total_bytes,
        dest_url=url,
        manifest_xxh3_128=digest,
        resumed=resumed,
        freed=freed,
    )


def _result(
    action: str, unit_rel: str, url: str, stub: Stub, state: str, *, resumed: bool, freed: bool
) -> UnitResult:
    return UnitResult(
        path=unit_rel,
        action=action,
        state=state,
        files=stub.files,
        bytes=stub.bytes,
        dest_url=url,
        manifest_xxh3_128=stub.manifest_xxh3,
        resumed=resumed,
        freed=freed,
    )


# -- recall ----------------------------------------------------------------------------------------
def source_of_stub(stub: Stub, site: SiteConfig, *, transfer: TransferConfig | None = None) -> Destination:
    """Where a stub says the unit is (its tier, by name, from the site config), to fetch from."""
    tier = site.tier(stub.to_tier)
    check_rel(stub.to_path, f"stub of {stub.unit}: to_path on tier {tier.name}")
    return open_destination(open_store(tier), stub.to_path, config=transfer)


def recall_unit(
    root: Path | Store,
    unit_rel: str,
    *,
    journal_dir: Path,
    site: SiteConfig,
    transfer: TransferConfig | None = None,
    depth: int = 0,
    node_local: bool = False,
) -> UnitResult:
    """Bring back the unit whose stub is `root/unit_rel.storekit-stub`, exactly as it was (from
    either end of a chain: a copy that moved on again is recalled to where this stub says first)."""
    root = source_root(root, unit_rel, "recall: unit path")
    unit = root / unit_rel
    spath = stub_path(unit)
    journal = UnitJournal(journal_dir, unit_id("recall", str(unit), ""))  # one recall per place
    with unit_leased("recall", unit, journal, node_local=node_local) as resumed:
        stub = read_stub(spath)
        if not resumed and stub is not None and _settle_interrupted_move(unit, stub, journal_dir):
            return _result(
                "recall", unit_rel, unit.as_uri(), stub, "already-present", resumed=True, freed=True
            )
        if not resumed:
            if stub is None:
                if os.path.lexists(unit):
                    return UnitResult(
                        path=unit_rel,
                        action="recall",
                        state="already-present",
                        files=0,
                        bytes=0,
                        dest_url=unit.as_uri(),
                        manifest_xxh3_128="",
                        resumed=False,
                        freed=False,
                    )
                raise NotFoundError(f"{spath}: no such stub (and no unit {unit})")
            if os.path.lexists(unit):
                return _unit_beside_its_stub(unit, unit_rel, stub, site, journal_dir, transfer)
            journal.advance(
                "planned", action="recall", unit=unit_rel, target=str(unit), stub=dataclasses.asdict(stub)
            )
        stub = Stub(**journal.doc["stub"])
        if journal.state in ("planned", "copying"):
            try:
                _recall_upstream(stub, site, journal_dir=journal_dir, transfer=transfer, depth=depth)
            except (StorekitError, OSError):  # nothing of this recall is written yet: no journal stays
                remove_tree(_recall_temp(unit, journal.id))
                log_action(journal_dir, "recall.failed", journal.id, unit=str(unit), rolled_back=True)
                journal.finish()
                raise
        source = source_of_stub(stub, site, transfer=transfer)
        try:
            return _recall(unit, unit_rel, journal, stub, source, resumed, where=_tier_at(site, root))
        finally:
            source.close()


def _tier_at(site: SiteConfig, root: Path) -> str:
    """The tier whose root is `root`, as messages name it."""
    for tier, rel in posix_tiers_holding(site, str(root)):
        if rel == "":
            return f"tier {tier.name}"
    return f"the tier at {root}"


def _recall_temp(unit: Path, uid: str) -> Path:
    """Where a recall fetches the unit before renaming it into place."""
    return unit.parent / f".{unit.name}{TMP_MARK}recall-{uid}"


def _unit_beside_its_stub(
    unit: Path,
    unit_rel: str,
    stub: Stub,
    site: SiteConfig,
    journal_dir: Path,
    transfer: TransferConfig | None,
) -> UnitResult:
    """The unit is back beside its stub and no journal says why (copied back by hand, a journal
    lost). The recall's goal is met if it is the copy the stub names, byte for byte: then only the
    stub goes. Anything else is refused with what differs and what to do; nothing is changed."""
    spath = stub_path(unit)
    source = source_of_stub(stub, site, transfer=transfer)
    try:
        data, url = source.manifest(), source.manifest_url
    finally:
        source.close()
    if data is None or manifest_digest(data) != stub.manifest_xxh3:
        gone = "gone" if data is None else "replaced since"
        differs: str | None = f"it cannot be compared: the copy the stub names is {gone}, {url}"
    else:
        differs = copy_differs(unit, walk_unit(unit), parse_unit_manifest(data, url))
    if differs is not None:
        raise StorekitError(
            f"{unit}: here beside its stub, and not the copy the stub names ({differs}); nothing was changed",
            hint=f"to keep the unit here, remove {spath}; to recall the copy, move the unit aside first",
        )
    spath.unlink()
    fsync_dir(unit.parent)
    why = "the unit here is the copy the stub names, byte for byte"
    log_action(journal_dir, "recall.stub-removed", stub.unit_id, stub=str(spath), reason=why)
    return _result("recall", unit_rel, unit.as_uri(), stub, "already-present", resumed=False, freed=True)


MAX_CHAIN = 4  # burst -> parallel -> archive is 2 hops; more means a loop of stubs


def _recall_upstream(
    stub: Stub, site: SiteConfig, *, journal_dir: Path, transfer: TransferConfig | None, depth: int
) -> None:
    """The copy this stub names is itself a stub now (drained, then archived from the parallel
    tier): recall it there first, so the recall goes on from a whole copy."""
    tier = site.tier(stub.to_tier)
    if tier.scheme != "file":
        return
    copy = tier_root(tier) / check_rel(stub.to_path, f"stub of {stub.unit}: to_path")
    if os.path.lexists(copy) or not stub_path(copy).exists():
        return
    if depth >= MAX_CHAIN:
        raise StorekitError(f"{stub_path(copy)}: a chain of more than {MAX_CHAIN} stubs (a loop?)")
    recall_unit(
        open_store(tier), stub.to_path, journal_dir=journal_dir, site=site, transfer=transfer, depth=depth + 1
    )


def finish_recall(
    unit: Path, unit_rel: str, journal: UnitJournal, stub: Stub, source: Destination
) -> UnitResult:
    """A journaled recall carried on from its last step (`tier gc`; the caller holds the lease)."""
    return _recall(unit, unit_rel, journal, stub, source, True)


def _settle_interrupted_move(unit: Path, stub: Stub, journal_dir: Path) -> bool:
    """The move that wrote `stub` was killed between its stub and the end of its free. True when
    the unit is still here (the recall's goal: the free is abandoned, the stub goes, the committed
    copy stays); False when it was freed (its journal is closed, the recall goes on)."""
    moved = UnitJournal(journal_dir, stub.unit_id)
    if not moved.load() or moved.doc.get("source") != str(unit) or not moved.reached("committed"):
        return False
    action = str(moved.doc.get("action"))
    if os.path.lexists(unit):
        spath = stub_path(unit)
        spath.unlink()
        fsync_dir(unit.parent)
        log_action(journal_dir, f"{action}.kept-source", moved.id, reason="recalled before it was freed")
        moved.finish()
        return True
    moved.advance("freed")
    log_action(journal_dir, f"{action}.freed", moved.id, source=str(unit), finished_by="recall")
    moved.finish()
    return False


def _recall(
    unit: Path,
    unit_rel: str,
    journal: UnitJournal,
    stub: Stub,
    source: Destination,
    resumed: bool,
    *,
    where: str = "",
) -> UnitResult:
    uid, jdir = journal.id, journal.dir
    temp = _recall_temp(unit, uid)
    timer = PhaseTimer()
    if journal.state in ("planned", "copying"):
        journal.advance("copying", temp=str(temp))
        try:
            timer.lap("plan")
            _recall_copy(unit, unit_rel, journal, stub, source, temp, where or f"the tier at {unit.parent}")
            timer.lap("copy")  # fetched, hashed, fsynced and checked against the manifest
        except (StorekitError, OSError) as exc:  # nothing was renamed into place: temp and journal go
            remove_tree(temp)
            log_action(jdir, "recall.failed", uid, unit=str(unit), rolled_back=True)
            journal.finish()
            if isinstance(exc, OSError):  # a read-only or vanished tier: one line, not a traceback
                raise storage_error(exc, str(exc.filename or temp)) or exc from None
            raise
    manifest, _data = _saved_manifest(journal)
    if journal.state == "copied":
        _check_tree(temp, manifest)
        journal.advance("verified")
        _log_verified(jdir, "recall", uid, manifest)
    if journal.state == "verified":
        if os.path.lexists(temp):
            os.rename(temp, unit)
            fsync_dir(unit.parent)
        elif not os.path.lexists(unit):
            raise NotFoundError(f"{temp}: the recalled copy is gone before it was renamed into place")
        faults.point("tier.renamed")
        journal.advance("committed")
        log_action(jdir, "recall.committed", uid, unit=str(unit))
        timer.lap("commit")
    if journal.state in ("committed", "stubbed"):
        spath = stub_path(unit)
        if spath.exists():
            spath.unlink()
            fsync_dir(unit.parent)
        journal.advance("freed")
        log_action(jdir, "recall.stub-removed", uid, stub=str(spath), bytes=manifest.total_bytes)
        timer.lap("free")
    journal.finish()
    return UnitResult(
        phases=timer.phases,
        path=unit_rel,
        action="recall",
        state="done",
        files=len(manifest.files),
        bytes=manifest.total_bytes,
        dest_url=unit.as_uri(),
        manifest_xxh3_128=stub.manifest_xxh3,
        resumed=resumed,
        freed=True,
        not_owned=tuple(str(p) for p in journal.doc.get("not_owned", ())),
    )


def _recall_copy(
    unit: Path, unit_rel: str, journal: UnitJournal, stub: Stub, source: Destination, temp: Path, where: str
) -> None:
    """Fetch the copy into `temp`, every file checked in the pass; the journal says `copied` after."""
    uid, jdir = journal.id, journal.dir
    data = source.manifest()
    if data is None:
        raise NotFoundError(
            f"{source.manifest_url}: the archive named by {stub_path(unit)} is gone; nothing was changed",
            hint="restore it from a backup, or remove the stub if the unit is no longer wanted",
        )
    if manifest_digest(data) != stub.manifest_xxh3:
        raise MismatchError(
            f"{source.manifest_url}: xxh3-128 {manifest_digest(data)} is not the stub's {stub.manifest_xxh3}"
        )
    journal.save_manifest(data)
    manifest = parse_unit_manifest(data, source.manifest_url)
    remove_tree(temp)
    check_space(unit.parent, manifest.total_bytes, len(manifest.entries), where)
    log_action(jdir, "recall.copy", uid, unit=unit_rel, source=source.url)
    try:  # every file checked against the manifest in the pass
        not_owned = materialize(manifest.entries, temp, source.fetch)
    except MismatchError as exc:  # evidence against the copy: no purge may trust it any more
        record_failed(jdir, source.manifest_url, exc.message)
        raise
    except NoSpaceError as exc:  # the tier filled up during the fetch: named, the partial copy goes
        raise NoSpaceError(
            f"{where} is full: {exc.message}; the partial copy was removed, nothing was changed",
            hint=f"free space on {where}, then recall again",
        ) from None
    fsync_dir(unit.parent)
    if not_owned:
        log_action(jdir, "recall.owners-not-restored", uid, entries=not_owned[:20], count=len(not_owned))
    journal.advance("copied", manifest_xxh3_128=stub.manifest_xxh3, not_owned=not_owned[:100])


def _check_tree(root: Path, manifest: UnitManifest) -> None:
    """The recalled tree holds exactly the manifest's entries (types, sizes, modes, mtimes, links);
    the bytes were checked while they were written."""
    got = {e.path: e for e in walk_unit(root)}
    want = {e.path: e for e in manifest.entries}
    if set(got) != set(want):
        extra = sorted(set(got) ^ set(want))
        raise MismatchError(f"{root}: entries differ from the manifest ({extra[0]}, {len(extra)} in all)")
    for path, w in want.items():
        g = got[path]
        same = (g.type, g.mtime_ns, g.target) == (w.type, w.mtime_ns, w.target)
        same = same and (w.type == "symlink" or g.mode == w.mode) and (w.type != FILE or g.size == w.size)
        if not same:
            raise MismatchError(f"{root}/{path}: not restored as the manifest says ({g} vs {w})")
