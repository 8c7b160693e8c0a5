"""`storekit init`, `storekit layout check|show` and `storekit status`."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from storekit.cli.common import (
    ConfigOpt,
    DryRunOpt,
    EveryTierOpt,
    JsonOpt,
    QuietOpt,
    TierOpt,
    exit_codes,
    make_output,
    noun_app,
    site_config,
    tier_store,
)
from storekit.cli.output import config_source
from storekit.config import SiteConfig, mask_url
from storekit.errors import ExitCode, NotFoundError, StorekitError, UnreachableError
from storekit.layout.check import RULES, CheckReport, check_layout
from storekit.layout.clean import CleanPlan
from storekit.layout.init import LayoutPlan, apply_init, plan_init
from storekit.layout.spec import LayoutSpec, load_layout
from storekit.layout.status import AreaUsage, TierStatus, root_missing, status_prometheus_text, tier_status
from storekit.metrics import write_textfile
from storekit.store import S3Store, Store, open_store
from storekit.units import format_bytes, format_duration

LayoutOpt = Annotated[
    str | None,
    typer.Option(
        "--layout",
        "-l",
        metavar="NAME|FILE",
        help="Layout to apply: a name from layouts/ (e.g. llm-cluster) or a .toml path. "
        "Default: the tier's `layout` in storekit.toml, else llm-cluster.",
    ),
]

layout_app = noun_app(
    None, "Check and show the /storage layout (datasets, checkpoints, logs, models, scratch)."
)
E = ExitCode


def register(app: typer.Typer) -> None:
    app.command("init", epilog=exit_codes(E.ERROR, E.USAGE, E.NOT_FOUND, E.RETRYABLE))(init)
    app.command("status", epilog=exit_codes(E.ERROR, E.USAGE, E.NOT_FOUND, E.RETRYABLE))(status)
    app.add_typer(layout_app, name="layout")


def init(
    tier: TierOpt = None,
    layout: LayoutOpt = None,
    adopt: Annotated[
        bool,
        typer.Option(
            "--adopt",
            help="Lay out an existing non-empty directory that holds no storekit layout yet (refused "
            "without this flag; its entries are kept, its mode becomes the layout's root mode).",
        ),
    ] = False,
    dry_run: DryRunOpt = False,
    json: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Create the layout's hierarchy on a tier, with its permissions.

    Creates the tier root and every area (datasets/{code,text,multimodal}, checkpoints, logs, models,
    scratch with the sticky bit), fixes the modes of existing area directories and sets the layout's
    quotas and striping on CephFS and Lustre (reported as skipped elsewhere). Idempotent: run it again at any
    time; it never deletes or moves anything. On an S3 tier it creates the bucket and prefix markers.

    It touches only a root that is missing, empty, or already holds one of the layout's areas; a
    non-empty directory that is not a storekit tree (a home, a shared /tmp) is refused, in a dry run
    too, unless --adopt.

    \b
    Examples:
      storekit init                       # ./storage with no config file
      storekit init --tier lustre --dry-run --json
    """
    out = make_output(json, quiet)
    cfg = site_config(config)
    store = tier_store(cfg, tier, probe=False)
    _probe_for_init(store)
    spec = load_layout(layout or store.tier.layout)
    plan = plan_init(spec, store, adopt=adopt)
    if not dry_run:
        apply_init(plan, store)  # the result lists every action once, on stdout
    out.result(
        "init",
        {"dry_run": dry_run, "applied": not dry_run, **plan.to_dict()},
        lambda c: _render_plan(c, plan, dry_run),
    )


def _probe_for_init(store: Store) -> None:
    try:
        store.probe()
    except NotFoundError:
        if not isinstance(store, S3Store):
            raise  # a missing S3 bucket is created by init; anything else is an error


def _config_line(c: Console) -> None:
    """The header line saying which config the report is of (cron mail from a wrong cwd shows it)."""
    c.print(f"config: {config_source()}", markup=False, soft_wrap=True)


def _render_plan(c: Console, plan: LayoutPlan, dry_run: bool) -> None:
    _config_line(c)
    verb = "would apply" if dry_run else "applied"
    if not plan.actions:
        c.print(f"tier {plan.tier} ({plan.url}) already matches layout {plan.layout}: nothing to do")
    else:
        table = Table(title=f"{verb}: layout {plan.layout} on tier {plan.tier} ({plan.url})")
        for col in ("action", "path", "mode", "detail"):
            table.add_column(col)
        for a in plan.actions:
            table.add_row(a.action, a.path or ".", a.mode or "", a.detail)
        c.print(table)
    for s in plan.skipped:
        c.print(f"skipped: {s}")


@layout_app.command("check", epilog=exit_codes(E.ERROR, E.USAGE, E.NOT_FOUND, E.MISMATCH, E.RETRYABLE))
def check(
    tier: TierOpt = None,
    layout: LayoutOpt = None,
    all_tiers: Annotated[bool, typer.Option("--all", help="Check every tier in the config.")] = False,
    json: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Report every violation of the layout, with its path and rule.

    Rules: missing-area, unknown-entry, misnamed (runs, steps, dataset kinds and versions), unexpected-file,
    incomplete (half-written leftovers: temp or partial names), missing-manifest (uncommitted checkpoint
    steps and dataset versions), ttl-expired (scratch), mode (wrong area modes; anything group/world-
    writable in read-only areas), quota, symlink-escape, incomplete-checkpoint (a writer did not
    finish it), bad-pointer (a tracker or latest naming a missing or incomplete unit), ambiguous-checkpoint
    (the markers of two writers), bad-stub (an unreadable *.storekit-stub), stub-beside-unit (an
    interrupted recall), fs-settings (a quota or striping on the file system that differs from the
    layout's). `storekit layout show` describes each. Read-only: it changes nothing.

    Exit 0 when clean, 4 when there are findings, 5 when a tier cannot be reached (every other tier
    is still checked and reported; the unreachable one is a row with its error).

    \b
    Examples:
      storekit layout check
      storekit layout check --all --json | jq '.tiers[].findings[]'
      storekit layout check --json | jq -r '.tiers[].findings[]
          | select(.rule == "missing-manifest") | .path'
    """
    out = make_output(json, quiet)
    cfg = site_config(config)
    names = list(cfg.tiers) if all_tiers else [cfg.tier(tier).name]
    reports: list[CheckReport] = []
    failures: list[StorekitError] = []
    for name in names:
        try:
            store = tier_store(cfg, name)
            spec = load_layout(layout or store.tier.layout)
            missing = root_missing(store)
            if missing is not None:  # down, as status and its metrics say: not "nothing to check"
                raise UnreachableError(
                    missing, hint=f"is it mounted? a new tier is created by: {_init_command(cfg, name)}"
                )
            reports.append(check_layout(spec, store))
        except (UnreachableError, NotFoundError) as exc:
            # one tier down must not hide the others: report it as a row, fail after all were checked
            failures.append(exc)
            url = mask_url(cfg.tiers[name].url)
            reports.append(
                CheckReport(tier=name, url=url, layout=layout or cfg.tiers[name].layout, error=exc.message)
            )
            if isinstance(exc, NotFoundError) and cfg.tiers[name].scheme == "file" and not exc.hint:
                exc.hint = f"no layout here yet; create it with: {_init_command(cfg, name)}"
    total = sum(len(r.findings) + sum(r.truncated.values()) for r in reports)
    out.result(
        "layout check",
        {
            "clean": total == 0 and not failures,
            "findings_total": total,
            "tiers_failed": len(failures),
            "tiers": [r.to_dict() for r in reports],
        },
        lambda c: _render_check(c, reports),
    )
    if failures:
        raise _combined(failures)
    if total:
        where = ", ".join(r.tier for r in reports if r.findings or sum(r.truncated.values()))
        out.failed(
            int(ExitCode.MISMATCH),
            f"{total} layout violation(s) on tier {where}",
            hint="run it without --quiet (or with --json) for the list",
        )


def _init_command(cfg: SiteConfig, tier: str) -> str:
    return "storekit init" if tier == cfg.default_tier else f"storekit init --tier {tier}"


def _combined(failures: list[StorekitError]) -> StorekitError:
    """One error for several tiers: an unreachable tier (retryable, 5) outranks a missing one (3)."""
    failures = sorted(failures, key=lambda f: not isinstance(f, UnreachableError))
    first = failures[0]
    if len(failures) > 1:
        first.message = f"{len(failures)} tiers could not be checked: " + "; ".join(
            f.message for f in failures
        )
        first.args = (first.message,)
    return first


def _render_check(c: Console, reports: list[CheckReport]) -> None:
    _config_line(c)
    for r in reports:
        if r.error is not None:
            c.print(f"tier {r.tier} ({r.url}): NOT CHECKED: {r.error}", markup=False)
            continue
        if r.clean:
            c.print(f"tier {r.tier} ({r.url}): clean against layout {r.layout} ({r.entries_scanned} entries)")
            continue
        table = Table(title=f"tier {r.tier} ({r.url}): {len(r.findings)} finding(s), layout {r.layout}")
        for col in ("rule", "path", "problem"):
            table.add_column(col, overflow="fold")
        for f in r.findings:
            table.add_row(f.rule, f.path, f.message)
        c.print(table)
        for rule, n in r.truncated.items():
            c.print(f"... and {n} more {rule} finding(s) not listed")
    for r in reports:
        for s in r.skipped:
            c.print(f"skipped on {r.tier}: {s}")


@layout_app.command("clean", epilog=exit_codes(E.ERROR, E.USAGE, E.NOT_FOUND, E.RETRYABLE))
def clean(
    tier: TierOpt = None,
    layout: LayoutOpt = None,
    dry_run: DryRunOpt = False,
    json: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Remove expired entries of areas with a TTL (scratch/: 14 days in llm-cluster).

    An entry expires when nothing in it changed for longer than the area's TTL; that includes the
    work directories of abandoned prepare runs. Kept: anything named after a Slurm job that is still
    in squeue (scratch/<jobid>, <jobid>_<task>, job-<jobid>), and every job-named entry when Slurm
    exists but cannot be asked. Each delete renames the entry to a hidden tombstone, makes that
    durable, then deletes it: an interrupted clean never leaves a half-deleted directory under its
    name, and the next clean removes the tombstone. Run with --dry-run first.

    \b
    Examples:
      storekit layout clean --dry-run
      storekit layout clean --tier lustre --json | jq '.deleted[]'
    """
    from storekit.layout.clean import apply_clean, plan_clean

    out = make_output(json, quiet)
    cfg = site_config(config)
    store = tier_store(cfg, tier)
    spec = load_layout(layout or store.tier.layout)
    plan = plan_clean(spec, store)
    deleted = [] if dry_run else apply_clean(plan, store)
    out.result(
        "layout clean",
        {"dry_run": dry_run, "deleted": [e.path for e in deleted], **plan.to_dict()},
        lambda c: _render_clean(c, plan, dry_run),
    )


def _render_clean(c: Console, plan: CleanPlan, dry_run: bool) -> None:
    _config_line(c)
    verb = "would delete" if dry_run else "deleted"
    deletes = [e for e in plan.entries if e.action == "delete"]
    c.print(
        f"tier {plan.tier} ({plan.url}): {verb} {len(deletes)} entr{'y' if len(deletes) == 1 else 'ies'} "
        f"({format_bytes(sum(e.bytes for e in deletes))}); Slurm: {plan.slurm}",
        markup=False,
    )
    for e in plan.entries:
        c.print(f"  {verb if e.action == 'delete' else e.action:<12} {e.path}  {e.reason}", markup=False)


@layout_app.command("show", epilog=exit_codes(E.USAGE, E.NOT_FOUND))
def show(
    tier: TierOpt = None,
    layout: LayoutOpt = None,
    json: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Print the layout: areas, modes, name patterns, TTLs, quotas and striping, and the check rules.

    Reads the layout file only; contacts no storage.

    \b
    Examples:
      storekit layout show
      storekit layout show --layout layouts/llm-cluster.toml --json
    """
    out = make_output(json, quiet)
    cfg = site_config(config)
    spec = load_layout(layout or cfg.tier(tier).layout)
    out.result("layout show", {"layout": _spec_dict(spec), "rules": RULES}, lambda c: _render_spec(c, spec))


def _spec_dict(spec: LayoutSpec) -> dict[str, object]:
    return {
        "name": spec.name,
        "source": spec.source,
        "description": spec.description,
        "root_mode": f"{spec.root_mode:04o}",
        "temp_patterns": list(spec.temp_patterns),
        "areas": [
            {
                "name": a.name,
                "description": a.description,
                "mode": f"{a.mode:04o}",
                "read_only": a.read_only,
                "create": list(a.create),
                "levels": [
                    {"name": lv.name, "pattern": lv.pattern.pattern, "committed_by": lv.committed_by}
                    for lv in a.levels
                ],
                "ttl_seconds": a.ttl_seconds,
                "quota_bytes": a.quota_bytes,
                "quota_files": a.quota_files,
                "striping": None
                if a.striping is None
                else {"count": a.striping.count, "size": a.striping.size},
            }
            for a in spec.areas
        ],
    }


def _render_spec(c: Console, spec: LayoutSpec) -> None:
    table = Table(title=f"layout {spec.name} ({spec.source})")
    for col in ("area", "mode", "levels", "rules", "description"):
        table.add_column(col, overflow="fold")
    for a in spec.areas:
        levels = "/".join(f"{lv.name}:{lv.pattern.pattern}" for lv in a.levels) or "free-form"
        rules = []
        if a.read_only:
            rules.append("read-only")
        if a.ttl_seconds:
            rules.append(f"ttl {format_duration(a.ttl_seconds)}")
        if a.quota_bytes:
            rules.append(f"quota {format_bytes(a.quota_bytes)}")
        if a.striping:
            rules.append(f"stripe {a.striping.count}x{format_bytes(a.striping.size)}")
        rules += [f"{lv.name} committed by {lv.committed_by}" for lv in a.levels if lv.committed_by]
        table.add_row(a.name, f"{a.mode:04o}", levels, ", ".join(rules), a.description)
    c.print(table)
    c.print("rules of `storekit layout check`:", markup=False)
    width = max(len(rule) for rule in RULES)
    for rule, meaning in RULES.items():
        c.print(f"  {rule:<{width}}  {meaning}", markup=False)


def status(
    tier: EveryTierOpt = None,
    layout: LayoutOpt = None,
    prometheus: Annotated[
        str | None,
        typer.Option(
            "--prometheus",
            metavar="FILE",
            help="Also write a node_exporter textfile-collector file (metrics storekit_*), atomically.",
        ),
    ] = None,
    json: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Bytes, files and free space per area, for every tier (or one with --tier).

    An unreachable tier is reported (storekit_tier_up 0) and makes the exit code 5 after everything
    else was reported and written. The Prometheus file passes `promtool check metrics` and is
    replaced atomically (mode 0644), as node_exporter's textfile collector needs.

    \b
    Examples:
      storekit status
      storekit status --json | jq '.tiers[].areas[] | {area, bytes}'
      storekit status --quiet \\
          --prometheus /var/lib/node_exporter/textfile/storekit.prom
    """
    out = make_output(json, quiet)
    cfg = site_config(config)
    names = [cfg.tier(tier).name] if tier else list(cfg.tiers)
    statuses = []
    for name in names:
        store = open_store(cfg.tiers[name])
        spec = load_layout(layout or store.tier.layout)
        statuses.append(tier_status(spec, store))
    if prometheus:
        write_textfile(prometheus, status_prometheus_text(statuses))
    out.result(
        "status",
        {"tiers": [s.to_dict() for s in statuses], "prometheus_file": prometheus},
        lambda c: _render_status(c, statuses),
    )
    down = [s for s in statuses if not s.reachable]
    if down:
        raise UnreachableError(
            f"{len(down)} tier(s) unreachable: " + "; ".join(s.error or s.tier for s in down)
        )


def _quota_cell(a: AreaUsage) -> str:
    """used/limit: the file system's quota where it enforces one, else the layout's."""
    limit = a.fs_quota_bytes if a.fs_quota_bytes is not None else a.quota_bytes
    if limit is None:
        return "-"
    return f"{format_bytes(a.bytes)}/{format_bytes(limit)}" + (
        " (fs)" if a.fs_quota_bytes is not None else ""
    )


def _render_status(c: Console, statuses: list[TierStatus]) -> None:
    _config_line(c)
    for st in statuses:
        if not st.reachable:
            c.print(f"tier {st.tier} ({st.url}): UNREACHABLE: {st.error}")
            continue
        free = "unknown" if st.free_bytes is None else format_bytes(st.free_bytes)
        table = Table(title=escape(f"tier {st.tier} [{st.role}] {st.url}, free {free}"))
        for col in ("area", "bytes", "files", "dirs", "free", "quota"):
            table.add_column(col, justify="right" if col != "area" else "left")
        for a in st.areas:
            table.add_row(
                a.area if a.exists else f"{a.area} (missing)",
                format_bytes(a.bytes),
                str(a.files),
                str(a.dirs),
                "unknown" if a.free_bytes is None else format_bytes(a.free_bytes),
                _quota_cell(a),
            )
        c.print(table)
