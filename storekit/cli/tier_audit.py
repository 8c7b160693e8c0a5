"""`storekit tier verify` (re-read archived units) and `storekit tier gc` (what crashes left)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from storekit.cli.common import ConfigOpt, DryRunOpt, JsonOpt, QuietOpt, exit_codes, make_output, site_config
from storekit.config import SiteConfig
from storekit.errors import ExitCode, MismatchError, NotFoundError, UsageError, storage_error
from storekit.places import tier_relative
from storekit.tier.audit import ArchiveVerifyResult, GcReport, find_stubs, gc, verify_stub
from storekit.tier.mover import tier_root
from storekit.tier.moveunit import journal_dir_for
from storekit.tier.verified import record_failed, record_verified
from storekit.units import format_bytes

E = ExitCode
PathsArg = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="[PATH]...",
        help="Tier-relative or absolute paths on POSIX tiers. Default: every POSIX tier.",
        show_default=False,
    ),
]
TierOpt = Annotated[
    str | None,
    typer.Option("--tier", "-t", metavar="NAME", help="Only this tier (default: every POSIX tier)."),
]


@contextlib.contextmanager
def one_line_storage_errors() -> Iterator[None]:
    """A storage failure nobody below turned into a storekit error (a read-only or full tier, a
    missing directory) is one line naming the path, with its exit code, never a traceback."""
    try:
        yield
    except OSError as exc:
        err = storage_error(exc, str(exc.filename) if exc.filename else "storage")
        if err is None:
            raise
        raise err from None


def _places(site: SiteConfig, paths: list[str] | None, tier: str | None) -> list[Path]:
    """Local directories or files to look in: each PATH on the tiers that have it, or whole tiers."""
    tiers = [t for t in site.tiers.values() if t.scheme == "file" and tier in (None, t.name)]
    if tier is not None and not tiers:
        site.tier(tier)  # an unknown name: not found, naming the known ones
        raise UsageError(f"tier {tier} is not a POSIX tier: stubs and tombstones live on POSIX tiers")
    if not paths:
        return [tier_root(t) for t in tiers]
    found: list[Path] = []
    for where in paths:
        rel, on_tier = tier_relative(site, where)
        if tier is not None and on_tier not in (None, tier):
            raise UsageError(f"{where} is on tier {on_tier}, not {tier}")
        here = [tier_root(t) / rel for t in tiers if on_tier in (None, t.name)]
        here = [p for p in here if os.path.lexists(p) or os.path.lexists(f"{p}.storekit-stub")]
        if not here:
            raise NotFoundError(f"{where}: not found on {tier or 'any POSIX tier'}")
        found.extend(here)
    return found


def verify_command(
    paths: PathsArg = None,
    sample: Annotated[
        float,
        typer.Option(
            "--sample",
            metavar="FRACTION",
            min=0.0,
            max=1.0,
            help="Re-read only this fraction of each unit's files (at least one). Default: all.",
        ),
    ] = 1.0,
    seed: Annotated[
        int | None, typer.Option("--seed", metavar="N", help="Seed of the sample (repeatable audits).")
    ] = None,
    tier: TierOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Re-read archived and drained units against their manifests, from where they went.

    Every stub below PATH names a unit's copy on another tier and the xxh3-128 of its manifest.
    The manifest must still be there with that digest, and every file of the copy (or a --sample)
    is read back and hashed: a flipped bit or a lost object is found long after the move.
    Exit 0 when every copy is whole, 4 when any is not (each problem named).

    \b
    Examples:
      storekit tier verify
      storekit tier verify checkpoints/run_001 --json
      storekit tier verify --tier lustre --sample 0.1 --seed 7
    """
    out = make_output(json_out, quiet)
    if sample <= 0:
        raise UsageError("--sample: give a fraction above 0 (e.g. 0.1), at most 1")
    site = site_config(config)
    stubs = list(find_stubs(_places(site, paths, tier)))
    results: list[ArchiveVerifyResult] = []
    for n, stub in enumerate(stubs, 1):
        out.info(f"[{n}/{len(stubs)}] {stub}")
        try:
            results.append(verify_stub(stub, site=site, sample=sample, seed=seed))
        except (MismatchError, NotFoundError) as exc:  # a damaged stub or an unknown tier: this one only
            results.append(ArchiveVerifyResult(stub=str(stub), url="", problems=[exc.message]))
    ok = all(not r.problems for r in results)
    with one_line_storage_errors():
        _record(site, results, whole=sample >= 1.0)
    doc = {
        "ok": ok,
        "sample": sample,
        "stubs": len(results),
        "files_checked": sum(r.files_checked for r in results),
        "bytes_checked": sum(r.bytes_checked for r in results),
        "results": [r.to_dict() for r in results],
    }

    def human(console: Console) -> None:
        for r in results:
            status = "FAILED" if r.problems else "OK"
            what = f"{r.files_checked} files, {format_bytes(r.bytes_checked)} read back"
            console.print(f"{status:<6} {r.stub} -> {r.url or '?'} ({what})", markup=False, soft_wrap=True)
            for p in r.problems:
                console.print(f"       {p}", markup=False, soft_wrap=True)
        if not results:
            console.print("no stubs found: nothing archived or drained here", markup=False)

    out.result("tier verify", doc, human)
    if not ok:
        bad = [r for r in results if r.problems]
        out.failed(
            int(E.MISMATCH),
            f"{len(bad)} of {len(results)} moved unit(s) failed their read-back, "
            f"the first: {bad[0].stub}: {bad[0].problems[0]}",
        )


def _record(site: SiteConfig, results: list[ArchiveVerifyResult], *, whole: bool) -> None:
    """Copies read back whole and right: a purge with verify_max_age may rely on this reading. A copy
    found bad (even in a sample) voids every earlier verification of it."""
    try:
        journal = journal_dir_for(site)
    except UsageError:
        return  # no shared POSIX tier: nowhere to keep the record (purges then read back themselves)
    for r in results:
        if r.problems and r.manifest_url:
            record_failed(journal, r.manifest_url, r.problems[0])
        elif whole and r.files_checked:
            record_verified(journal, r.manifest_url, r.manifest_xxh3_128, stamp=r.copy_stamp)


def gc_command(
    paths: PathsArg = None,
    tier: TierOpt = None,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Remove what killed moves left: abandoned copies, their uploads, tombstones.

    Only what a unit journal names is touched: for a move killed before its commit (no live
    lease), its journaled multipart uploads are aborted (never a bucket's others) and the
    objects or temp copies it wrote are removed. A committed move is carried to its end: its
    stub written, its source freed (a recall's stub removed); no journal is left.
    Tombstones (interrupted deletes) below PATH, or below every POSIX tier, are removed.
    --dry-run says what would go and changes nothing.

    \b
    Examples:
      storekit tier gc --dry-run
      storekit tier gc --json
      storekit tier gc checkpoints/run_001
    """
    out = make_output(json_out, quiet)
    site = site_config(config)
    journal = journal_dir_for(site)
    with one_line_storage_errors():
        report = gc(journal, roots=_places(site, paths, tier), site=site, dry_run=dry_run)
    doc = {"journal_dir": str(journal), "dry_run": dry_run, **report.to_dict()}
    out.result("tier gc", doc, lambda c: _show_gc(c, report, dry_run))


def _show_gc(console: Console, report: GcReport, dry_run: bool) -> None:
    verb = "would roll back" if dry_run else "rolled back"
    lines: list[tuple[str, list[str]]] = [
        (verb, report.rolled_back),
        ("aborted upload", report.aborted_uploads),
        ("would remove" if dry_run else "removed", report.tombstones),
        ("would finish" if dry_run else "finished", report.finished),
        ("left", report.left),
    ]
    shown: list[Any] = [(word, item) for word, items in lines for item in items]
    for word, item in shown:
        console.print(f"{word}: {item}", markup=False, soft_wrap=True)
    if not shown:
        console.print("nothing to collect", markup=False)


def register(tier_app: typer.Typer) -> None:
    """`tier verify` and `tier gc` on the `tier` group (storekit.cli.tier builds it)."""
    tier_app.command("verify", epilog=exit_codes(E.ERROR, E.USAGE, E.NOT_FOUND, E.MISMATCH, E.RETRYABLE))(
        verify_command
    )
    tier_app.command("gc", epilog=exit_codes(E.ERROR, E.USAGE, E.NOT_FOUND, E.RETRYABLE))(gc_command)
