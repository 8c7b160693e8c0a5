"""`storekit ckpt list|latest|verify|adopt|prune`: checkpoints of a run, by their writers' rules."""

from __future__ import annotations

import posixpath
import time
from dataclasses import dataclass
from typing import Annotated

import typer
from rich.console import Console

from storekit.checkpoint.actions import (
    adopt_manifest,
    apply_prune,
    plan_prune,
    verify_unit,
    write_adopted,
)
from storekit.checkpoint.scan import COMPLETE, INCOMPLETE, Problem, RunScan, Unit, scan_area_run
from storekit.cli.common import (
    ConfigOpt,
    DryRunOpt,
    JsonOpt,
    QuietOpt,
    TierOpt,
    exit_codes,
    make_output,
    noun_app,
    site_config,
)
from storekit.errors import ExitCode, NotFoundError, StorekitError, UsageError
from storekit.layout.spec import AreaSpec, load_layout
from storekit.pipeline.location import resolve_location
from storekit.store import Store
from storekit.stubs import Stub
from storekit.stubs import stub_rel as stub_name
from storekit.units import format_bytes, format_duration, parse_duration

ckpt_app = noun_app(
    "ckpt", "Checkpoints of a training run: which are whole, which to resume from, verify, adopt, prune."
)
E = ExitCode

RunArg = Annotated[
    str,
    typer.Argument(
        metavar="RUN",
        help="A run: its name (run_001, in the checkpoints area of the tier), a tier-relative path "
        "(checkpoints/run_001), an absolute path or an s3:// URL.",
    ),
]
UnitArg = Annotated[
    str,
    typer.Argument(metavar="RUN[/STEP]", help="A run, or one checkpoint of it (run_001/step_000100)."),
]


def register(app: typer.Typer) -> None:
    app.add_typer(ckpt_app, name="ckpt")


@dataclass(frozen=True)
class _Place:
    store: Store
    area: AreaSpec
    run: str  # store-relative run directory
    unit: str | None  # a unit name inside it, when the argument named one


def _place(arg: str, config: str | None, tier: str | None, *, allow_unit: bool) -> _Place:
    site = site_config(config)
    if "://" not in arg and not arg.startswith(("/", "./", "../", "~")):
        tier_cfg = site.tier(tier)
        area = _writers_area(tier_cfg.layout)
        rel = arg.strip("/")
        # run_001[/STEP] is relative to the checkpoints area; a path starting with an area of the
        # layout (checkpoints/run_001, scratch/job_7/run_x/STEP) is relative to the tier root
        if load_layout(tier_cfg.layout).area(rel.split("/", 1)[0]) is None:
            rel = f"{area.name}/{rel}"
        arg = rel
    loc = resolve_location(arg, site, tier)
    area = _writers_area(loc.store.tier.layout)
    if loc.tier_name is None and allow_unit and _is_unit(loc.store, loc.rel, area):
        # a path outside every tier is rooted at its parent: root it one level up, so that the
        # run is a directory of the store and the checkpoint one of its units
        parent = resolve_location(arg.rstrip("/").rpartition("/")[0] or "/", site, tier)
        return _Place(parent.store, area, parent.rel, posixpath.basename(loc.rel))
    parts = loc.rel.split("/")
    depth = len(parts) - 1 if parts[0] == area.name else None
    run_depth = len(area.levels)
    if depth is None:  # outside the checkpoints area: a run unless its parent scans it as a unit
        return _adhoc(loc.store, area, loc.rel, allow_unit)
    if depth == run_depth:
        return _Place(loc.store, area, loc.rel, None)
    if depth == run_depth + 1 and allow_unit:
        return _Place(loc.store, area, posixpath.dirname(loc.rel), parts[-1])
    raise UsageError(
        f"{arg}: expected a run ({'/'.join(lv.name for lv in area.levels)}) below {area.name}/"
        + (" or one of its checkpoints" if allow_unit else "")
    )


def _is_unit(store: Store, rel: str, area: AreaSpec) -> bool:
    """A directory outside the tiers named like a unit of an accepted writer, with no units, unit
    files or trackers inside it (an Orbax `run_123` step and a run `run_123` look alike)."""
    name = posixpath.basename(rel)
    if not any(p.matches_unit(name) for p in area.writers) or not store.exists(rel):
        return False
    try:
        entries = store.list(rel) if store.info(rel).is_dir else []
    except StorekitError:  # an object-store prefix without a directory entry, a race: not a unit
        return False
    for entry in entries:
        for p in area.writers:
            if (p.tracker is not None and entry.name == p.tracker.file) or (
                p.matches_unit(entry.name) and (entry.is_dir or p.unit_files)
            ):
                return False
    return True


def _adhoc(store: Store, area: AreaSpec, rel: str, allow_unit: bool) -> _Place:
    if allow_unit and "/" in rel:
        parent, name = posixpath.split(rel)
        if any(p.matches_unit(name) for p in area.writers) and store.exists(parent):
            return _Place(store, area, parent, name)
    return _Place(store, area, rel, None)


def _writers_area(layout: str) -> AreaSpec:
    spec = load_layout(layout)
    area = next((a for a in spec.areas if a.writers), None)
    if area is None:
        raise UsageError(f"layout {spec.name} has no area with checkpoint writers (`writers = [...]`)")
    return area


def _scan(place: _Place, now: float) -> RunScan:
    if not place.store.exists(place.run):
        raise NotFoundError(f"{place.store.display_url}/{place.run}: no such run")
    # the layout's temp patterns (`*.partial`, `.tmp*`) as layout check applies them: leftovers
    temp = load_layout(place.store.tier.layout).temp_patterns
    return scan_area_run(place.store, place.run, place.area, temp=temp, now=now)


def _where(store: Store, unit: Unit) -> str:
    return store.local_path(unit.path) or f"{store.display_url}/{unit.path}"


def _unit_doc(store: Store, unit: Unit, now: float) -> dict[str, object]:
    doc = unit.to_dict()
    doc["location"] = _where(store, unit)
    doc["tier"] = store.tier.name
    doc["age_s"] = None if unit.newest_mtime is None else round(now - unit.newest_mtime, 3)
    return doc


def _stub_doc(run: str, name: str, stub: Stub) -> dict[str, object]:
    """A moved checkpoint as `ckpt list` shows it: where its stub is, and where the unit went."""
    return {
        "path": posixpath.join(run, name),
        "stub": posixpath.join(run, stub_name(name)),
        "state": "archived",
        **stub.to_dict(),
    }


@ckpt_app.command("list", epilog=exit_codes(E.USAGE, E.NOT_FOUND, E.RETRYABLE))
def list_command(
    run: RunArg,
    tier: TierOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Every checkpoint of RUN: step, writer, state, size, files, age and where it lives.

    States: complete (its writer's rule holds and the writer's tracker names it or a later one),
    in-progress (incomplete but changed within the layout's quiet period: the writer may still be
    running), incomplete, archived (moved by `storekit tier`; its `<name>.storekit-stub` says to
    which tier; `storekit tier --recall RUN/NAME` brings it back). Exit 0, 3 when RUN does not exist.

    \b
    Examples:
      storekit ckpt list run_001
      storekit ckpt list /lustre/storage/checkpoints/run_001 --json | jq .units
    """
    out = make_output(json_out, quiet)
    now = time.time()
    place = _place(run, config, tier, allow_unit=False)
    scan = _scan(place, now)
    latest = scan.latest()
    doc = {
        "run": place.run,
        "tier": place.store.tier.name,
        "latest": _where(place.store, latest) if latest else None,
        "units": [_unit_doc(place.store, u, now) for u in scan.units],
        "archived": [_stub_doc(place.run, name, stub) for name, stub in sorted(scan.stubs.items())],
        "pointers": scan.pointers,
        "problems": [p.__dict__ for p in scan.problems],
    }

    def human(console: Console) -> None:
        n = len(scan.units)
        console.print(f"{place.store.display_url}/{place.run}  ({n} checkpoint{'' if n == 1 else 's'})")
        console.print(f"{'STEP':>9} {'NAME':<22} {'WRITER':<10} {'STATE':<11} {'SIZE':>9} {'FILES':>5} AGE")
        for u in scan.units:
            step = "-" if u.step is None else str(u.step)
            age = "-" if u.newest_mtime is None else format_duration(max(0.0, now - u.newest_mtime))
            mark = "*" if latest is not None and u.name == latest.name else " "
            console.print(
                f"{step:>9} {u.name[:22]:<22} {(u.writer or '?')[:10]:<10} {u.state:<11} "
                f"{format_bytes(u.bytes):>9} {u.files:>5} {age}{mark}"
            )
            if u.state != "complete":
                console.print(f"{'':>10}{u.reason}", markup=False)
        for name, stub in sorted(scan.stubs.items()):
            step = "-" if stub.step is None else str(stub.step)
            console.print(
                f"{step:>9} {name[:22]:<22} {(stub.writer or '?')[:10]:<10} {'archived':<11} "
                f"{format_bytes(stub.bytes):>9} {stub.files:>5} "
                f"{stub.done_verb} to {stub.to_tier}:{stub.to_path}",
                markup=False,
            )
        for p in scan.problems:
            console.print(f"{p.rule}: {p.path}: {p.message}", markup=False)
        console.print("* newest complete (what `storekit ckpt latest` prints)")

    out.result("ckpt list", doc, human)


@ckpt_app.command("latest", epilog=exit_codes(E.USAGE, E.NOT_FOUND, E.MISMATCH, E.RETRYABLE))
def latest_command(
    run: RunArg,
    tier: TierOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Print the path of the newest complete checkpoint of RUN (exit 3 when there is none).

    Made for job scripts: a resumed job starts from what this prints, never from a half-written step.
    When the writer's own tracker (`latest`, `latest_checkpointed_iteration.txt`) names a missing or
    incomplete checkpoint, or leaves the run, the newest complete one is still printed, stderr says
    what is wrong with the tracker, and the exit code is 4: a loader that reads the tracker itself
    (DeepSpeed's load_checkpoint without a tag) would fail. The tracker is left as it is.

    \b
    Examples:
      storekit ckpt latest run_001
      storekit ckpt latest checkpoints/run_001 --tier lustre --json
      # in an sbatch script:
      #   srun train.py --resume-from "$(storekit ckpt latest run_001)"
    """
    out = make_output(json_out, quiet)
    now = time.time()
    place = _place(run, config, tier, allow_unit=False)
    scan = _scan(place, now)
    unit = scan.latest()
    trouble = _pointer_trouble(scan)
    for problem in trouble:
        out.warn(f"{place.store.display_url}/{problem.path}: {problem.message}")
    if unit is None:
        raise NotFoundError(f"{place.store.display_url}/{place.run}: no complete checkpoint")
    if trouble and not out.quiet:
        out.err.print(f"hint: {_pointer_hint(place, scan, unit)}", markup=False)
    doc = {
        "path": _where(place.store, unit),
        "unit": _unit_doc(place.store, unit, now),
        "ok": not trouble,
        "pointer_problems": [p.__dict__ for p in trouble],
    }
    out.result("ckpt latest", doc, lambda console: console.print(doc["path"], markup=False, soft_wrap=True))
    if trouble:  # --quiet: the one reason for exit 4, as an error line
        where = f"{place.store.display_url}/{trouble[0].path}"
        hint = _pointer_hint(place, scan, unit)
        out.failed(int(ExitCode.MISMATCH), f"{where}: {trouble[0].message}", hint=hint)


def _pointer_trouble(scan: RunScan) -> list[Problem]:
    """The run's trackers that a loader reading them would fail on (layout check's bad-pointer)."""
    return [p for p in scan.problems if p.rule == "bad-pointer"]


def _pointer_hint(place: _Place, scan: RunScan, unit: Unit) -> str:
    store = place.store
    paths = sorted(
        {store.local_path(p.path) or f"{store.display_url}/{p.path}" for p in _pointer_trouble(scan)}
    )
    how = f" (DeepSpeed: load_checkpoint(dir, tag={unit.name!r}))" if unit.writer == "deepspeed" else ""
    return (
        f"the newest complete checkpoint is {unit.name}: resume from it by path{how}; storekit "
        f"leaves {', '.join(paths)} as the writer left it: once checked, point it at a complete "
        "step by hand"
    )


@ckpt_app.command("verify", epilog=exit_codes(E.ERROR, E.USAGE, E.NOT_FOUND, E.MISMATCH, E.RETRYABLE))
def verify_command(
    target: UnitArg,
    tier: TierOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Re-hash checkpoints against their storekit manifest; check the rule of those without one.

    RUN verifies every checkpoint of the run but those in progress, and its trackers; RUN/STEP one
    (a name, a tier-relative or an absolute path, inside a tier or not). Every file is re-hashed: a
    changed or missing file, a file the manifest does not name and a damaged manifest.json are all
    reported, for every checkpoint of the run, as are incomplete checkpoints and a tracker (DeepSpeed's
    `latest`) naming a missing or incomplete one. A checkpoint of another writer without a manifest
    is checked by its writer's completeness rule only (no digest exists: `ckpt adopt` writes one).
    Exit 0 when all pass, 4 on any damage or incomplete checkpoint (named), 3 when RUN or STEP does
    not exist.

    \b
    Examples:
      storekit ckpt verify run_001/step_000100
      storekit ckpt verify run_001 --json
    """
    out = make_output(json_out, quiet)
    now = time.time()
    place = _place(target, config, tier, allow_unit=True)
    scan = _scan(place, now)
    # a whole run: the complete checkpoints and the incomplete ones (a loader fails on those: damage),
    # not those in progress or temp names; and the trackers a loader without a tag would follow
    units = [_one(place, scan)] if place.unit else _verified_units(scan)
    trouble = [] if place.unit else _pointer_trouble(scan)
    results = [verify_unit(place.store, u) for u in units]
    for problem in trouble:
        out.warn(f"{place.store.display_url}/{problem.path}: {problem.message}")
    newest = scan.latest()
    if trouble and newest is not None:
        out.err.print(f"hint: {_pointer_hint(place, scan, newest)}", markup=False)
    ok = all(r.ok for r in results) and not trouble
    doc = {
        "run": place.run,
        "ok": ok,
        "results": [r.to_dict() for r in results],
        "pointer_problems": [p.__dict__ for p in trouble],
    }

    def human(console: Console) -> None:
        for r in results:
            status = "OK" if r.ok else "FAILED"
            how = "re-hashed" if r.digest else "rule only, no digest"
            console.print(
                f"{r.unit.path}: {status} ({how}; {r.files} files, {format_bytes(r.bytes)})", markup=False
            )
            for p in r.problems:
                console.print(f"  {p['path']}: {p['problem']}", markup=False)
            if r.note:
                console.print(f"  {r.note}", markup=False)
        if not results:
            console.print(f"{place.run}: no checkpoint to verify")

    out.result("ckpt verify", doc, human)
    if not ok:
        bad = [r for r in results if not r.ok]
        first = f": {bad[0].problems[0]['path']}: {bad[0].problems[0]['problem']}" if bad[0].problems else ""
        out.failed(
            int(ExitCode.MISMATCH),
            f"{len(bad)} of {len(results)} checkpoint(s) failed verification, "
            f"the first: {bad[0].unit.path}{first}",
        )


def _verified_units(scan: RunScan) -> list[Unit]:
    return [u for u in scan.units if not u.is_temp and u.state in (COMPLETE, INCOMPLETE)]


def _one(place: _Place, scan: RunScan) -> Unit:
    unit = scan.unit(place.unit or "")
    if unit is None:
        raise NotFoundError(
            f"{place.store.display_url}/{place.run}/{place.unit}: not a checkpoint of an accepted writer "
            f"({', '.join(p.name for p in place.area.writers)})",
            hint=f"storekit ckpt list {place.run}",
        )
    return unit


@ckpt_app.command("adopt", epilog=exit_codes(E.ERROR, E.USAGE, E.NOT_FOUND, E.MISMATCH, E.RETRYABLE))
def adopt_command(
    target: Annotated[str, typer.Argument(metavar="RUN/STEP", help="The checkpoint to adopt.")],
    tier: TierOpt = None,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Write a storekit manifest for a complete checkpoint of another writer.

    Hashes every file (size, xxh3-128, mode, mtime) and writes manifest.json last and atomically;
    the checkpoint's own files are not touched. It can then be verified and archived. With
    --dry-run the files are hashed and the manifest printed, but nothing is written. Exit 1 when
    the checkpoint is not complete or already has a manifest, 3 when it does not exist.

    \b
    Examples:
      storekit ckpt adopt run_001/iter_0002000 --dry-run
      storekit ckpt adopt /lustre/storage/checkpoints/run_002/checkpoint-500
    """
    out = make_output(json_out, quiet)
    place = _place(target, config, tier, allow_unit=True)
    if place.unit is None:
        raise UsageError(f"{target}: name one checkpoint (RUN/STEP), not a run")
    scan = _scan(place, time.time())
    unit = _one(place, scan)
    manifest = adopt_manifest(place.store, unit)
    if not dry_run:
        write_adopted(place.store, unit, manifest)
    doc = {
        "path": _where(place.store, unit),
        "writer": unit.writer,
        "dry_run": dry_run,
        "files": len(manifest.files),
        "bytes": manifest.total_bytes,
    }
    verb = "would write" if dry_run else "wrote"
    out.result(
        "ckpt adopt",
        doc,
        lambda c: c.print(
            f"{doc['path']}: {verb} manifest.json ({unit.writer}; {len(manifest.files)} files, "
            f"{format_bytes(manifest.total_bytes)})",
            markup=False,
        ),
    )


@ckpt_app.command("prune", epilog=exit_codes(E.ERROR, E.USAGE, E.NOT_FOUND, E.RETRYABLE))
def prune_command(
    run: RunArg,
    keep_last: Annotated[
        int | None, typer.Option("--keep-last", metavar="N", help="Keep the N newest complete (required).")
    ] = None,
    keep_every: Annotated[
        int | None, typer.Option("--keep-every", metavar="K", help="Also keep steps that are multiples of K.")
    ] = None,
    incomplete_older_than: Annotated[
        str | None,
        typer.Option(
            "--incomplete-older-than",
            metavar="AGE",
            help="Also delete incomplete leftovers unchanged for AGE (e.g. 1d, 6h).",
        ),
    ] = None,
    tier: TierOpt = None,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Delete old checkpoints of RUN, keeping the newest complete ones.

    Never deletes the newest complete checkpoint, one a tracker or `latest` pointer names, or one in
    progress; incomplete leftovers only with --incomplete-older-than. Each deletion renames the
    checkpoint to a tombstone, fsyncs, then deletes, so a crash never leaves a half-deleted directory
    under a real step name (a rerun finishes it). Exit 0, 3 when RUN does not exist.

    \b
    Examples:
      storekit ckpt prune run_001 --keep-last 3 --dry-run
      storekit ckpt prune run_001 --keep-last 2 --keep-every 10000 \\
          --incomplete-older-than 1d
    """
    out = make_output(json_out, quiet)
    if keep_last is None:
        raise UsageError("--keep-last N is required: how many of the newest complete checkpoints to keep")
    older = None
    if incomplete_older_than is not None:
        try:
            older = parse_duration(incomplete_older_than)
        except ValueError as exc:
            raise UsageError(f"--incomplete-older-than: {exc}") from None
    now = time.time()
    place = _place(run, config, tier, allow_unit=False)
    scan = _scan(place, now)
    actions = plan_prune(
        scan, keep_last=keep_last, keep_every=keep_every, incomplete_older_than=older, now=now
    )
    deleted = [] if dry_run else apply_prune(place.store, scan, actions)
    trouble = _pointer_trouble(scan)
    newest = scan.latest()
    for problem in trouble:
        out.warn(f"{place.store.display_url}/{problem.path}: {problem.message}")
    if trouble and newest is not None and not out.quiet:
        out.err.print(f"hint: {_pointer_hint(place, scan, newest)}", markup=False)
    doc = {
        "run": place.run,
        "dry_run": dry_run,
        "actions": [a.to_dict() for a in actions],
        "deleted": deleted,
        "freed_bytes": sum(a.unit.bytes for a in actions if a.delete),
        "pointer_problems": [p.__dict__ for p in trouble],
    }

    def human(console: Console) -> None:
        for a in actions:
            verb = ("would delete" if dry_run else "deleted") if a.delete else "keep"
            console.print(f"{verb:<12} {a.unit.name}  ({a.reason})", markup=False)
        total = format_bytes(sum(a.unit.bytes for a in actions if a.delete))
        console.print(f"{'would free' if dry_run else 'freed'} {total}")

    out.result("ckpt prune", doc, human)
