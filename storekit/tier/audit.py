"""`tier verify` (re-read archived units against their manifests) and `tier gc` (what crashes left).

verify follows each stub to its manifest, checks the manifest's digest against the stub's, and reads
back every file (or a sample) from the destination: the audit that catches a flipped bit or a lost
object long after the move. gc takes only what a journal names: for a move abandoned before its
commit (no live lease), the journaled multipart uploads are aborted (never a bucket's others), the
objects or temp copies it wrote are removed and the journal goes; a committed move is carried to its
end (stub, then free; a recall's stub removed), so no journal outlives a gc. Tombstones
(interrupted deletes) below the given roots are removed.
"""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from storekit.config import SiteConfig, TierConfig, file_url_path, mask_url
from storekit.durable import TMP_MARK, is_tombstone, purge_tombstones, remove_tree
from storekit.errors import BusyError, MismatchError, NotFoundError, StorekitError
from storekit.lease import Lease, binding_lease, sibling_lease_path
from storekit.manifest import FILE, UnitEntry, manifest_digest, parse_unit_manifest
from storekit.ops.journal import FileUploadJournal
from storekit.places import posix_tiers_holding
from storekit.store import open_store
from storekit.stubs import STUB_SUFFIX, Stub, is_stub_name
from storekit.tier.dest import Destination, S3Destination, open_destination
from storekit.tier.mover import (
    MAX_CHAIN,
    UnitChanged,
    finish_recall,
    free_committed,
    posix_temp_tag,
    remove_own_temps,
    source_of_stub,
)
from storekit.tier.relpath import bad_rel
from storekit.tier.stubfile import read_stub
from storekit.tier.unitjournal import UnitJournal, journals, log_action, state_index
from storekit.tier.verified import remove_temps as remove_verified_temps


@dataclass
class ArchiveVerifyResult:
    stub: str
    url: str
    manifest_url: str = ""
    manifest_xxh3_128: str = ""
    files_checked: int = 0
    bytes_checked: int = 0
    problems: list[str] = field(default_factory=list)
    copy_stamp: str = ""  # the copy's stamp before a whole read-back (storekit.tier.verified)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def find_stubs(paths: Iterable[Path]) -> Iterator[Path]:
    """Stub files named directly, or found below directories (sorted; tombstones and temps skipped)."""
    for path in paths:
        if path.name.endswith(STUB_SUFFIX) and path.is_file():
            yield path
            continue
        candidate = path.parent / f"{path.name}{STUB_SUFFIX}"
        if candidate.is_file():
            yield candidate
            continue
        if not path.is_dir():
            raise NotFoundError(f"{path}: no such stub or directory")
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = sorted(d for d in dirnames if not is_tombstone(d) and TMP_MARK not in d)
            for name in sorted(filenames):
                if is_stub_name(name):
                    yield Path(dirpath) / name


def _moved_on(stub: Stub, site: SiteConfig) -> Path | None:
    """The stub that stands where this stub's POSIX copy was (the copy moved on: a chain)."""
    tier = site.tier(stub.to_tier)
    if tier.scheme != "file" or tier.local_root is None or bad_rel(stub.to_path) is not None:
        return None
    copy = Path(tier.local_root) / stub.to_path
    there = copy.parent / f"{copy.name}{STUB_SUFFIX}"
    return there if not os.path.lexists(copy) and there.is_file() else None


def _verify_chain(
    stub: Stub, upstream: Path, *, site: SiteConfig, sample: float, seed: int | None, depth: int
) -> ArchiveVerifyResult:
    """First hop: its manifest must still be the stub's; the bytes are verified where they went."""
    first = source_of_stub(stub, site)
    try:
        data = first.manifest()
    finally:
        first.close()
    result = verify_stub(upstream, site=site, sample=sample, seed=seed, depth=depth + 1)
    if data is None or manifest_digest(data) != stub.manifest_xxh3:
        result.problems.insert(0, f"{first.manifest_url}: missing or not the manifest the stub names")
    return result


def verify_stub(
    stub_file: Path, *, site: SiteConfig, sample: float = 1.0, seed: int | None = None, depth: int = 0
) -> ArchiveVerifyResult:
    """Re-read the archived unit a stub names; problems listed (never raised) except a damaged stub."""
    stub = read_stub(stub_file)
    if stub is None:
        raise NotFoundError(f"{stub_file}: no such stub")
    upstream = _moved_on(stub, site)
    if upstream is not None and depth < MAX_CHAIN:
        result = _verify_chain(stub, upstream, site=site, sample=sample, seed=seed, depth=depth)
        result.stub = f"{stub_file} (moved on: {result.stub})"
        return result
    source = source_of_stub(stub, site)
    result = ArchiveVerifyResult(
        stub=str(stub_file),
        url=source.url,
        manifest_url=source.manifest_url,
        manifest_xxh3_128=stub.manifest_xxh3,
    )
    try:
        data = source.manifest()
        if data is None:
            result.problems.append(f"{source.manifest_url}: archive manifest missing (the archive is gone)")
            return result
        if manifest_digest(data) != stub.manifest_xxh3:
            result.problems.append(f"{source.manifest_url}: manifest digest differs from the stub's")
            return result
        try:
            manifest = parse_unit_manifest(data, source.manifest_url)
        except MismatchError as exc:
            result.problems.append(str(exc))
            return result
        files = manifest.files
        if sample < 1.0:
            rng = random.Random(seed)
            files = [f for f in files if rng.random() < sample] or files[:1]
        else:
            result.copy_stamp = source.stamp(files)
        result.problems.extend(source.readback(files))
        result.files_checked = len(files)
        result.bytes_checked = sum(f.size for f in files)
    finally:
        source.close()
    return result


@dataclass
class GcReport:
    rolled_back: list[str] = field(default_factory=list)  # unit journals whose uncommitted copy was removed
    aborted_uploads: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)  # "<journal>: why" (in use)
    finished: list[str] = field(default_factory=list)  # committed moves carried to their end
    tombstones: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def gc(
    journal_dir: Path, *, roots: Iterable[Path] = (), site: SiteConfig | None = None, dry_run: bool = False
) -> GcReport:
    report = GcReport()
    for root in roots:  # first: a committed move finished below removes its own tombstone unreported
        for directory in _dirs_with_tombstones(root):
            if dry_run:
                report.tombstones.extend(str(directory / n) for n in os.listdir(directory) if is_tombstone(n))
            else:
                report.tombstones.extend(str(directory / n) for n in purge_tombstones(directory))
    damaged: list[str] = []
    for journal in journals(journal_dir, tidy=not dry_run, damaged=damaged):
        _gc_journal(journal, site, dry_run, report)
    # never guessed at: which step its move reached is unknown, so its unit is left as it is
    report.left.extend(f"{why}; left as it is: check its unit, then remove the file" for why in damaged)
    if not dry_run:
        remove_verified_temps(journal_dir)
    return report


def _gc_journal(journal: UnitJournal, site: SiteConfig | None, dry_run: bool, report: GcReport) -> None:
    doc = journal.doc
    unit = _unit_of(doc)
    lease_path = sibling_lease_path(unit)
    host = node_local_elsewhere(journal, site)
    if host is not None:  # the same path on this node is another node's unit, or none at all
        report.left.append(f"{journal.path}: a move on node-local {unit} of host {host}; run gc there")
        return
    if not unit.parent.is_dir():  # the run or dataset directory was removed since: no lease there
        down = tier_down(unit, site)
        if down is not None:  # not removed: its tier is not there now (unmounted): wait for it
            report.left.append(f"{journal.path}: {down}; left for when the tier is back")
            return
        if dry_run:
            done = report.finished if _committed(journal) else report.rolled_back
            done.append(f"{journal.path}: {unit.parent} is gone")
        elif _committed(journal):
            report.finished.append(f"{journal.path}: {finish_without_directory(journal)}")
        else:
            _roll_back(journal, unit, site, report)
        return
    if dry_run:
        holder = binding_lease(lease_path)
        if holder is not None:
            report.left.append(f"{journal.path}: in use by {holder.describe()}")
        elif _committed(journal):
            report.finished.append(f"{journal.path}: {journal.doc.get('action')} committed")
        else:
            report.rolled_back.append(str(journal.path))
        return
    try:  # held while rolling back: no rerun starts on the unit meanwhile; a dead holder's lease goes
        lease = Lease(lease_path, purpose=f"running tier gc of {unit}")
        lease.acquire()
    except BusyError as exc:
        report.left.append(f"{journal.path}: in use ({exc.message})")
        return
    try:
        if journal.load():
            if _committed(journal):
                report.finished.append(f"{journal.path}: {finish_committed(journal, site)}")
            else:
                _roll_back(journal, unit, site, report)
    finally:
        lease.release()


def finish_interrupted(journal_dir: Path, site: SiteConfig) -> list[str]:
    """Before a run: the committed moves that a kill interrupted, carried to their end (a plan would
    skip their units as already stubbed, or as gone); moves still running elsewhere are left."""
    done: list[str] = []
    # read only: a live move's temps are its own; a damaged journal is `tier gc`'s to report
    for journal in journals(journal_dir, tidy=False, damaged=[]):
        if not _committed(journal):
            continue  # uncommitted: the rerun of its unit resumes it, `tier gc` rolls it back
        doc = journal.doc
        unit = _unit_of(doc)
        if node_local_elsewhere(journal, site) is not None:
            continue  # its node's own rerun or gc finishes it
        if not unit.parent.is_dir():  # removed since the kill: nothing left to free or to stub there
            if tier_down(unit, site) is None:  # (an unmounted tier is not a removed run: it waits)
                done.append(f"{unit}: {finish_without_directory(journal)}")
            continue
        try:
            lease = Lease(sibling_lease_path(unit), purpose=f"finishing an interrupted move of {unit}")
            lease.acquire()
        except BusyError:
            continue
        try:
            if journal.load() and _committed(journal):
                done.append(f"{unit}: {finish_committed(journal, site)}")
        finally:
            lease.release()
    return done


def node_local_elsewhere(journal: UnitJournal, site: SiteConfig | None) -> str | None:
    """The host a move of a unit on a node-local (burst) tier ran on, when that is not this host:
    the journals are shared, the unit is not, and only that host may finish or roll it back."""
    host = journal.doc.get("host")
    if site is None or not isinstance(host, str) or host == socket.gethostname():
        return None
    holding = posix_tiers_holding(site, str(_unit_of(journal.doc)))
    return host if any(tier.role == "burst" for tier, _rel in holding) else None


def tier_down(path: Path, site: SiteConfig | None) -> str | None:
    """Why the POSIX tier holding `path` cannot be looked at now (its root missing: not mounted; or
    its probe fails), None when it is there (or unknown): a directory missing on a tier that is up
    was removed, on one that is down it is only out of sight."""
    for tier, _rel in posix_tiers_holding(site, str(path)):
        root = tier.local_root
        if not os.path.isdir(str(root)):
            return f"tier {tier.name}: its root {root} is not there (not mounted?)"
        try:
            open_store(tier).probe()
        except StorekitError as exc:
            return exc.message
        return None
    return None


def _committed(journal: UnitJournal) -> bool:
    """A move past its commit: carried forward, never rolled back."""
    doc = journal.doc
    action = str(doc.get("action"))
    temp = Path(str(doc.get("temp", ""))) if action == "recall" else None
    # a recall killed right after its rename: the unit is back whole, only the stub is left to go
    renamed = temp is not None and journal.state == "verified" and not os.path.lexists(temp)
    return state_index(journal.state) >= state_index("committed") or renamed


def finish_committed(journal: UnitJournal, site: SiteConfig | None) -> str:
    """Carry a committed move whose run was killed to its end (the caller holds the unit's lease):
    the stub written and the source freed (or kept, if it changed), a recall's stub removed."""
    doc = journal.doc
    action = str(doc.get("action"))
    unit = _unit_of(doc)
    if unit.parent.is_dir():  # what a kill inside the free left (the mover's own start does this)
        purge_tombstones(unit.parent)
        remove_own_temps(unit)
    if action == "recall":
        if site is None:
            raise NotFoundError(f"{journal.path}: a recall needs the site's tiers to finish")
        stub = Stub(**doc["stub"])
        source = source_of_stub(stub, site)
        try:
            finish_recall(Path(str(doc["target"])), str(doc.get("unit", "")), journal, stub, source)
        finally:
            source.close()
        return "recall finished: the unit is back, its stub removed"
    src = Path(str(doc["source"]))
    dest = _dest_of(journal, site)
    try:
        r = free_committed(action, src, str(doc.get("unit", "")), journal, dest, True)
    except UnitChanged as exc:
        return f"{action} finished: {exc.message}"
    finally:
        dest.close()
    return f"{action} finished: source {'freed, stub in place' if r.freed else 'kept (copy only)'}"


def finish_without_directory(journal: UnitJournal) -> str:
    """A committed move whose unit's directory was removed after the kill (a run deleted by hand):
    no stub can stand there and nothing is left to free; the committed copy stays where it is, and
    the operator is told where, since no stub names it any more."""
    doc = journal.doc
    action = str(doc.get("action"))
    unit = _unit_of(doc)
    log_action(journal.dir, f"{action}.directory-gone", journal.id, unit=str(unit), dest=doc.get("dest"))
    journal.finish()
    if action == "recall":
        return f"recall finished: {unit.parent} is gone (removed since), so is the unit"
    return (
        f"{action} finished: {unit.parent} is gone (removed since), so is its stub; "
        f"the committed copy stays at {mask_url(str(doc.get('dest', '?')))}"
    )


def _roll_back(journal: UnitJournal, unit: Path, site: SiteConfig | None, report: GcReport) -> None:
    doc = journal.doc
    action = str(doc.get("action"))
    if action == "purge" or (action != "recall" and not doc.get("dest")):
        pass  # killed before anything was copied; a purge's copy predates it and is never removed
    elif action == "recall":
        temp = Path(str(doc.get("temp", "")))
        if temp.name:
            remove_tree(temp)
    else:
        dest = _dest_of(journal, site)
        try:
            if isinstance(dest, S3Destination):
                report.aborted_uploads.extend(dest.engine.abort_journaled())
            left = dest.discard(_files_of(doc))
        finally:
            dest.close()
        report.left.extend(f"{where}: could not be removed (rolling back {journal.path})" for where in left)
    journal.purge_temps()
    log_action(journal.dir, "gc.rolled-back", journal.id, state=journal.state, unit=str(unit))
    journal.finish()
    report.rolled_back.append(str(journal.path))


def _unit_of(doc: dict[str, Any]) -> Path:
    """The unit a move's journal is about: a recall's target, any other move's source."""
    return Path(str(doc["target"] if doc.get("action") == "recall" else doc["source"]))


def _dest_of(journal: UnitJournal, site: SiteConfig | None) -> Destination:
    doc = journal.doc
    url = str(doc.get("dest", ""))
    name = str(doc.get("tier", ""))
    if url.startswith("s3://"):
        from storekit.places import s3_options_for

        bucket, _, key = url[len("s3://") :].partition("/")
        tier = TierConfig(name=name, url=f"s3://{bucket}", options=s3_options_for(url, site))
        uploads = FileUploadJournal(journal.uploads_path)
        return open_destination(open_store(tier), key, journal=uploads)
    # the store of the directory the copy is in: the journal names the copy, not its tier's root
    dest = Path(file_url_path(url))
    store = open_store(TierConfig(name=name, url=dest.parent.as_uri()))
    tag = posix_temp_tag(str(doc.get("action")), journal.id)
    return open_destination(store, dest.name, temp_tag=tag, replaces=str(doc.get("replaces", "")))


def _files_of(doc: dict[str, Any]) -> list[UnitEntry]:
    out = []
    for path, kind, *_ in doc.get("fingerprint", []):
        if kind == FILE:
            out.append(UnitEntry(path=str(path), type=FILE, mode=0, mtime_ns=0))
    return out


def _dirs_with_tombstones(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        if any(is_tombstone(n) for n in dirnames + filenames):
            yield Path(dirpath)
        dirnames[:] = [d for d in dirnames if not is_tombstone(d)]
