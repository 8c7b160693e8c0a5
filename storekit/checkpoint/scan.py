"""Which checkpoints of a run are whole: units, their writer and state, and the run's pointers.

`scan_run(store, run, profiles)` is the one answer `layout check`, `storekit ckpt` and the tier
engine share. A unit is *complete* when its writer's rule holds and, where the writer keeps a tracker
(`latest`, `latest_checkpointed_iteration.txt`), the tracker names it or a later unit; a unit that
fails that but changed within the quiet period is *in progress* (its writer may still be running),
otherwise *incomplete*.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol

from storekit.checkpoint.counts import COUNTS
from storekit.durable import TMP_MARK
from storekit.errors import NotFoundError, StorekitError
from storekit.lease import is_lease_name
from storekit.store import Entry, Store
from storekit.stubs import ARCHIVE_SUFFIX, STUB_SUFFIX, Stub, is_stub_name, parse_stub
from storekit.writerprofiles import WriterProfile

COMPLETE, INCOMPLETE, IN_PROGRESS = "complete", "incomplete", "in-progress"
MANIFEST = "manifest.json"
POINTER_MAX = 4096  # a tracker holds a name or a number; anything longer is not one


@dataclass(frozen=True, kw_only=True)
class Unit:
    path: str  # relative to the store root
    name: str
    writer: str | None  # None when no accepted writer can be told
    step: int | None
    state: str  # COMPLETE | INCOMPLETE | IN_PROGRESS
    reason: str  # why this state, in words: the rule met, or what is missing
    is_file: bool = False
    is_temp: bool = False  # a writer's in-progress name (staging dir, tmp dir), never resumable
    bytes: int = 0
    files: int = 0
    newest_mtime: float | None = None
    has_manifest: bool = False  # a storekit manifest.json is inside: verifiable
    tracked_by: str | None = None  # the tracker or pointer naming exactly this unit

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Problem:
    rule: str  # a layout check rule name
    path: str
    message: str


@dataclass
class RunScan:
    run: str
    units: list[Unit] = field(default_factory=list)
    beside: list[str] = field(default_factory=list)  # trackers, pointers, markers, stubs, extras
    problems: list[Problem] = field(default_factory=list)
    pointers: dict[str, str] = field(default_factory=dict)  # tracker path -> unit name it names
    markers: dict[str, str] = field(default_factory=dict)  # unit name -> path of its unfinished marker
    stubs: dict[str, Stub] = field(default_factory=dict)  # unit name -> the stub left where it was moved from
    kept: dict[str, str] = field(default_factory=dict)  # unit name -> why its writer's rotation keeps it

    def complete(self) -> list[Unit]:
        return sorted((u for u in self.units if u.state == COMPLETE), key=lambda u: (u.step or -1, u.name))

    def latest(self) -> Unit | None:
        done = self.complete()
        return done[-1] if done else None

    def unit(self, name: str) -> Unit | None:
        return next((u for u in self.units if u.name == name), None)


@dataclass
class _Candidate:
    entry: Entry
    profiles: list[WriterProfile]
    rels: list[str] = field(default_factory=list)
    bytes: int = 0
    files: int = 0
    newest: float | None = None


def _record_in_writing(name: str) -> bool:
    """`.<unit>.storekit-archive.json.storekit-tmp-*` (or a stub's): a unit's record being written
    (a drain's commit stages the manifest before renaming the unit in), never a unit of its own."""
    return name.startswith(".") and any(
        f"{suffix}{TMP_MARK}" in name for suffix in (ARCHIVE_SUFFIX, STUB_SUFFIX)
    )


def scan_run(
    store: Store,
    run: str,
    profiles: Sequence[WriterProfile],
    *,
    beside: Iterable[str] = (),
    temp: Iterable[str] = (),
    quiet_seconds: float = 600.0,
    now: float | None = None,
) -> RunScan:
    """Classify every entry of the run directory `run` (store-relative) by the writers' rules.

    `beside` and `temp` are name globs of the layout: entries allowed beside units whatever the writer,
    and names any interrupted writer leaves (`*.partial`, `*.storekit-tmp-*`).
    """
    now = time.time() if now is None else now
    entries = store.list(run)  # NotFoundError (exit 3) when the run does not exist
    scan = RunScan(run=run)
    markers: dict[str, str] = {}  # what a marker's {unit} stands for -> the marker's path
    trackers: list[tuple[Entry, list[WriterProfile]]] = []
    candidates: list[_Candidate] = []
    temps: list[tuple[Entry, WriterProfile | None]] = []
    beside_globs, temp_globs = tuple(beside), tuple(temp)
    for entry in entries:
        name = entry.name
        if not entry.is_dir and (
            is_stub_name(name)
            or is_lease_name(name)
            or name.endswith(ARCHIVE_SUFFIX)
            or _record_in_writing(name)
        ):
            # storekit's own, whatever the layout says: a moved unit's stub, a unit's archive manifest
            # (a drain's destination) or one of them being written, the lease of a run moving a unit
            scan.beside.append(entry.path)
            continue
        marked = _marker_owner(name, profiles)
        if marked is not None:
            markers[marked] = entry.path
            scan.beside.append(entry.path)
            continue
        owners = [p for p in profiles if p.tracker is not None and p.tracker.file == name]
        if owners and not entry.is_dir:
            trackers.append((entry, owners))
            scan.beside.append(entry.path)
            continue
        if owners:  # a loader opens it as a file and fails: never a silent extra
            who = ", ".join(p.name for p in owners)
            scan.problems.append(
                Problem("bad-pointer", entry.path, f"a directory where the tracker file of {who} belongs")
            )
            scan.beside.append(entry.path)
            continue
        temp_owner = next((p for p in profiles if p.is_temp(name)), None)
        if temp_owner is not None or any(fnmatch.fnmatchcase(name, g) for g in temp_globs):
            temps.append((entry, temp_owner))
            continue
        fits = [p for p in profiles if p.matches_unit(name) and (entry.is_dir or p.unit_files)]
        if fits and not entry.is_link:
            candidates.append(_Candidate(entry, fits))
            continue
        if any(p.is_beside(name) for p in profiles) or any(
            fnmatch.fnmatchcase(name, g) for g in beside_globs
        ):
            scan.beside.append(entry.path)
            continue
        if entry.is_link:
            continue  # layout check judges links (symlink-escape); not a unit
        kind = "directory" if entry.is_dir else "file"
        scan.problems.append(
            Problem(
                "misnamed" if entry.is_dir else "unexpected-file",
                entry.path,
                f"{kind} {name!r} is no unit, tracker or temp name of the accepted writers "
                f"({', '.join(p.name for p in profiles)})",
            )
        )
    for cand in candidates:
        _measure(store, cand)
    units = [_judge(store, c, markers, quiet_seconds, now, scan) for c in candidates]
    units += [_temp_unit(store, e, p, quiet_seconds, now) for e, p in temps]
    scan.units = _apply_trackers(store, units, trackers, scan, quiet_seconds, now)
    scan.units.sort(key=lambda u: (u.step if u.step is not None else -1, u.name))
    _read_stubs(store, scan)
    _read_keeps(store, scan, profiles)
    return scan


KEEPS_MAX = 16 * 1024 * 1024  # trainer_state.json grows with the log history; bound what is read


def _read_keeps(store: Store, scan: RunScan, profiles: Sequence[WriterProfile]) -> None:
    """Units a writer's own rotation keeps, as its newest complete unit records them (HF Trainer:
    trainer_state.json's best_model_checkpoint, which rotate_checkpoints never deletes)."""
    for p in profiles:
        if p.keeps is None:
            continue
        done = [u for u in scan.complete() if u.writer == p.name and not u.is_file]
        if not done:
            continue
        newest = done[-1]
        path = posixpath.join(newest.path, p.keeps.file)
        try:
            if store.info(path).size > KEEPS_MAX:
                continue
            value = json.loads(store.read_bytes(path)).get(p.keeps.key)
        except (StorekitError, ValueError, AttributeError):
            continue  # unreadable: nothing extra is kept by it, the newest complete still is
        if not isinstance(value, str) or not value:
            continue
        name = posixpath.basename(value.replace("\\", "/").rstrip("/"))
        if scan.unit(name) is not None:
            scan.kept[name] = f"{p.keeps.key} in {newest.name}/{p.keeps.file}"


def _read_stubs(store: Store, scan: RunScan) -> None:
    """Stubs (`<unit>.storekit-stub`) stand for moved units: readable, and never beside the unit itself."""
    present = {u.name for u in scan.units}
    for path in scan.beside:
        name = posixpath.basename(path)
        if not is_stub_name(name):
            continue
        unit = name[: -len(STUB_SUFFIX)]
        try:
            scan.stubs[unit] = parse_stub(store.read_bytes(path), path)
        except StorekitError as exc:
            scan.problems.append(Problem("bad-stub", path, exc.message.removeprefix(f"{path}: ")))
            continue
        if unit in present:
            scan.problems.append(
                Problem(
                    "stub-beside-unit",
                    path,
                    f"{unit} is here and its stub too (an interrupted recall?): "
                    f"rerun `storekit tier --recall {posixpath.join(scan.run, unit)}`",
                )
            )


def _marker_owner(name: str, profiles: Sequence[WriterProfile]) -> str | None:
    for p in profiles:
        unit = p.is_marker(name)
        if unit is not None:
            return unit
    return None


def _measure(store: Store, cand: _Candidate) -> None:
    entry = cand.entry
    cand.newest = entry.mtime
    if not entry.is_dir:
        cand.bytes, cand.files, cand.rels = entry.size, 1, []
        return
    prefix = entry.path + "/"
    for sub in store.scan(entry.path):  # the streaming scanner: one listing per directory
        cand.rels.append(sub.rel[len(prefix) :])
        if sub.mtime_ns:
            cand.newest = max(cand.newest or 0.0, sub.mtime_ns / 1e9)
        if not sub.is_dir:
            cand.bytes += sub.size
            cand.files += 1


def _met(profile: WriterProfile, rels: list[str], store: Store) -> bool:
    if not any(all(_has(rels, g) for g in alt) for alt in profile.complete):
        return False
    return not (
        profile.commit_file and not store.capabilities.atomic_rename and profile.commit_file not in rels
    )


def _has(rels: list[str], pattern: str) -> bool:
    return any(fnmatch.fnmatchcase(r, pattern) for r in rels)


def _missing(profile: WriterProfile, store: Store) -> str:
    need = profile.describe_complete()
    if profile.commit_file and not store.capabilities.atomic_rename:
        need += f" (+ {profile.commit_file} on this tier: no atomic rename)"
    return f"{profile.name}: no {need}"


def _judge(
    store: Store,
    cand: _Candidate,
    markers: dict[str, str],
    quiet: float,
    now: float,
    scan: RunScan,
) -> Unit:
    entry, rels = cand.entry, cand.rels
    if entry.is_dir:
        met = [p for p in cand.profiles if _met(p, rels, store)]
    else:
        met = [p for p in cand.profiles if p.unit_files]
    marked = [p for p in cand.profiles if p.unfinished and p.marker_key(entry.name) in markers]
    if marked:
        scan.markers[entry.name] = markers[marked[0].marker_key(entry.name)]
    has_manifest = MANIFEST in rels
    foreign = [p for p in met if p.name != "storekit"]
    if len(foreign) > 1:
        names = " and ".join(p.name for p in foreign)
        scan.problems.append(
            Problem("ambiguous-checkpoint", entry.path, f"carries the commit markers of {names}")
        )
        return _unit(cand, None, INCOMPLETE, f"markers of {names} in one unit", has_manifest)
    writer = foreign[0] if foreign else (met[0] if met else None)
    recent = cand.newest is not None and now - cand.newest < quiet
    short = _count_short(store, writer, entry, rels) if writer is not None and not marked else None
    if short is not None and writer is not None:
        state = IN_PROGRESS if recent else INCOMPLETE
        return _unit(cand, writer, state, f"{writer.name}: {short}", has_manifest)
    if writer is not None and not marked:
        return _unit(cand, writer, COMPLETE, f"{writer.name}: {_rule_text(writer, rels)}", has_manifest)
    if marked:
        p = marked[0]
        state = IN_PROGRESS if recent else INCOMPLETE
        marker = posixpath.basename(markers[p.marker_key(entry.name)])
        return _unit(cand, p, state, f"{p.name}: marker {marker} present", has_manifest)
    signed = [p for p in cand.profiles if any(_has(rels, g) for g in p.signature)] or cand.profiles
    guess = signed[0] if len(signed) == 1 else None
    reason = "; ".join(_missing(p, store) for p in signed)
    return _unit(cand, guess, IN_PROGRESS if recent else INCOMPLETE, reason, has_manifest)


def _count_short(store: Store, writer: WriterProfile, entry: Entry, rels: list[str]) -> str | None:
    """What the writer's rank count finds missing (counts.py), or None when all are there."""
    if writer.count is None or not entry.is_dir:
        return None
    return COUNTS[writer.count](store, entry.path, rels)


def _rule_text(p: WriterProfile, rels: list[str]) -> str:
    for alt in p.complete:
        if all(_has(rels, g) for g in alt):
            return " + ".join(alt) + " present"
    return "unit file present"


def _unit(cand: _Candidate, writer: WriterProfile | None, state: str, reason: str, manifest: bool) -> Unit:
    step = writer.step_of(cand.entry.name) if writer else cand.profiles[0].step_of(cand.entry.name)
    return Unit(
        path=cand.entry.path,
        name=cand.entry.name,
        writer=writer.name if writer else None,
        step=step,
        state=state,
        reason=reason,
        is_file=not cand.entry.is_dir,
        bytes=cand.bytes,
        files=cand.files,
        newest_mtime=cand.newest,
        has_manifest=manifest,
    )


def _temp_unit(store: Store, entry: Entry, profile: WriterProfile | None, quiet: float, now: float) -> Unit:
    cand = _Candidate(entry, [profile] if profile else [])
    _measure(store, cand)
    match = profile.unit.match(entry.name.lstrip(".")) if profile else None
    step = int(match.group("step")) if match and match.groupdict().get("step") else None
    recent = cand.newest is not None and now - cand.newest < quiet
    who = profile.name if profile else "an interrupted writer"
    return Unit(
        path=entry.path,
        name=entry.name,
        writer=profile.name if profile else None,
        step=step,
        state=IN_PROGRESS if recent else INCOMPLETE,
        reason=f"{who}: temporary name (a write in progress, or a leftover of an interrupted one)",
        is_file=not entry.is_dir,
        is_temp=True,
        bytes=cand.bytes,
        files=cand.files,
        newest_mtime=cand.newest,
    )


def _apply_trackers(
    store: Store,
    units: list[Unit],
    trackers: list[tuple[Entry, list[WriterProfile]]],
    scan: RunScan,
    quiet: float,
    now: float,
) -> list[Unit]:
    by_name = {u.name: u for u in units if not u.is_temp}
    for entry, owners in trackers:
        text = _read_pointer(store, entry)
        if text is None:
            scan.problems.append(Problem("bad-pointer", entry.path, "unreadable or not a short text file"))
            continue
        if "/" in text or text in (".", ".."):
            scan.problems.append(
                Problem("bad-pointer", entry.path, f"holds {text!r}: a pointer names a unit of its run only")
            )
            continue
        resolved = _resolve(text, owners, by_name)
        if resolved is None:
            if text == "release":
                continue  # Megatron's tracker for a released (exported) model
            owners_text = ", ".join(p.name for p in owners)
            scan.problems.append(
                Problem("bad-pointer", entry.path, f"holds {text!r}, which names no unit of {owners_text}")
            )
            continue
        profile, unit_name, step = resolved
        scan.pointers[entry.path] = unit_name
        target = by_name.get(unit_name)
        if target is None:
            scan.problems.append(
                Problem("bad-pointer", entry.path, f"names {unit_name}, which does not exist in {scan.run}")
            )
        elif target.state != COMPLETE:
            scan.problems.append(
                Problem(
                    "bad-pointer", entry.path, f"names {unit_name}, which is {target.state}: {target.reason}"
                )
            )
        for u in list(by_name.values()):
            if u.writer != profile.name or u.step is None:
                continue
            if u.name == unit_name:
                by_name[u.name] = _replace(u, tracked_by=entry.name)
            elif step is not None and u.step > step and u.state == COMPLETE:
                recent = u.newest_mtime is not None and now - u.newest_mtime < quiet
                by_name[u.name] = _replace(
                    u,
                    state=IN_PROGRESS if recent else INCOMPLETE,
                    reason=f"{profile.name}: {entry.name} names {unit_name}; this later unit was never "
                    "recorded (its writer stopped before updating the tracker)",
                )
    return list(by_name.values()) + [u for u in units if u.is_temp]


def _resolve(
    text: str, owners: list[WriterProfile], by_name: dict[str, Unit]
) -> tuple[WriterProfile, str, int | None] | None:
    for p in owners:
        assert p.tracker is not None
        if p.tracker.holds == "unit" and p.matches_unit(text):
            return p, text, p.step_of(text)
        if p.tracker.holds == "step" and text.isdigit():
            step = int(text)
            named = next((u.name for u in by_name.values() if u.writer == p.name and u.step == step), None)
            if named is None:  # the unit it names is gone: say which name the writer would have used
                named = next((u.name for u in by_name.values() if u.step == step), f"step {step}")
            return p, named, step
    return None


def _read_pointer(store: Store, entry: Entry) -> str | None:
    if entry.is_link or entry.size > POINTER_MAX:
        return None
    try:
        data = store.read_bytes(entry.path)
    except (NotFoundError, StorekitError):
        return None
    try:
        return data.decode("utf-8").strip()
    except UnicodeDecodeError:
        return None


def _replace(u: Unit, **changes: object) -> Unit:
    fields = u.to_dict()
    fields.update(changes)
    return Unit(**fields)  # type: ignore[arg-type]


def unit_rel(run: str, name: str) -> str:
    return posixpath.join(run, name)


class AreaRules(Protocol):
    """What a layout area (storekit.layout.spec.AreaSpec) tells a scan; the layout's checks import
    this module, so it names the fields rather than the layout's type."""

    @property
    def writers(self) -> Sequence[WriterProfile]: ...

    @property
    def beside(self) -> Iterable[str]: ...

    @property
    def quiet_seconds(self) -> float: ...


def scan_area_run(
    store: Store, run: str, area: AreaRules, *, temp: Iterable[str] = (), now: float | None = None
) -> RunScan:
    """`scan_run` with the writers, stubs and quiet period a layout area declares (what tier uses)."""
    return scan_run(
        store, run, area.writers, beside=area.beside, temp=temp, quiet_seconds=area.quiet_seconds, now=now
    )
