"""`storekit tier --archive|--drain|--recall|--policy|--apply`: reviewed plans that move whole units."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperGroup, TyperOption

from storekit import faults
from storekit.cli import tier_audit
from storekit.cli.common import (
    CommandContext,
    ConfigOpt,
    JsonOpt,
    QuietOpt,
    exit_codes,
    make_output,
    site_config,
)
from storekit.cli.tier_audit import one_line_storage_errors
from storekit.config import SiteConfig
from storekit.durable import write_file_atomic
from storekit.errors import ExitCode, NotFoundError, UsageError, storage_errors
from storekit.layout.spec import load_layout
from storekit.places import tier_relative
from storekit.policies import Policy, adhoc_policy, merged_policies
from storekit.rootprobe import guard_root
from storekit.store import open_store
from storekit.tier.apply import apply_plan, check_unit, exit_code_of
from storekit.tier.mover import UnitResult
from storekit.tier.plan import PlanRequest, TierPlan, build_plan, load_plan, render_plan
from storekit.units import format_bytes, rate_unit

E = ExitCode
ROLE_DEFAULT = "@roles"  # `--drain` with no value: the burst tier's checkpoints, by the tiers' roles


class _TierGroup(TyperGroup):
    """`--drain` takes an optional value (`--drain` alone drains by the tiers' roles): Typer has no
    optional option values, so a `--drain` with no value after it is read as `--drain=@roles`."""

    def parse_args(self, ctx: CommandContext, args: list[str]) -> list[str]:
        return super().parse_args(ctx, _drain_value(self, args))


def _drain_value(group: TyperGroup, args: list[str]) -> list[str]:
    """`args` with a bare `--drain` (last, or before another option) given its default value; what
    follows the group's own options (the subcommand, `--`) is left as typed."""
    takes_value = {o for p in group.params if isinstance(p, TyperOption) and not p.is_flag for o in p.opts}
    args = list(args)
    at = 0
    while at < len(args) and args[at].startswith("-") and args[at] != "--":
        nxt = args[at + 1] if at + 1 < len(args) else None
        if args[at] == "--drain" and (nxt is None or (nxt.startswith("-") and len(nxt) > 1)):
            args[at] = f"--drain={ROLE_DEFAULT}"
        elif args[at] in takes_value:
            at += 1  # its value, whatever it looks like
        at += 1
    return args


tier_app = typer.Typer(
    name="tier",
    cls=_TierGroup,
    invoke_without_command=True,
    no_args_is_help=True,
    rich_markup_mode=None,
    suggest_commands=True,
    subcommand_metavar="[COMMAND] [ARGS]...",  # a subcommand is optional: `tier --drain` runs alone
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)


tier_audit.register(tier_app)  # `tier verify` and `tier gc`


def register(app: typer.Typer) -> None:
    app.add_typer(tier_app, name="tier")


def _policies(site: SiteConfig) -> dict[str, Policy]:
    layouts = {t.layout for t in site.tiers.values()}
    from_layouts: dict[str, Policy] = {}
    for name in sorted(layouts):
        from_layouts.update(load_layout(name).policies)
    return merged_policies(site.policies, from_layouts)


def _request(
    site: SiteConfig, action: str, value: str | None, policy_name: str | None, tier: str | None
) -> PlanRequest:
    if tier is not None and tier not in site.tiers:
        known = ", ".join(sorted(site.tiers))
        raise UsageError(f"--tier {tier}: no such tier in {site.source} (known: {known})")
    named = _policies(site)
    if policy_name is not None:
        if policy_name not in named:
            known = ", ".join(sorted(named)) or "none"
            raise NotFoundError(f"no policy named {policy_name!r} (known: {known})")
        return PlanRequest(named[policy_name], tier)
    assert value is not None
    if value == ROLE_DEFAULT:
        return PlanRequest(adhoc_policy(action), tier)
    if value in named:
        p = named[value]
        if p.action != action:
            raise UsageError(f"policy {value} is a {p.action} policy", hint=f"storekit tier --policy {value}")
        return PlanRequest(p, tier)
    rel, on_tier = tier_relative(site, value)
    if tier is not None and on_tier is not None and tier != on_tier:
        raise UsageError(f"{value} is on tier {on_tier}, not {tier}")
    return PlanRequest(adhoc_policy(action, paths=(rel,), area=rel.split("/")[0]), tier or on_tier)


def _unit_line(console: Console, u: dict[str, Any]) -> None:
    frm, to = u["src_tier"], u["dst_tier"]
    free = "" if u["action"] == "recall" else "free source" if u["free_source"] else "keep source"
    console.print(
        f"{u['action']:<8} {u['src_path'] if u['action'] != 'recall' else u['dst_path']}  "
        f"{format_bytes(u['bytes'])}, {u['files']} files  {frm} -> {to}  {free}",
        markup=False,
        soft_wrap=True,
    )
    console.print(f"         why: {u['reason']}", markup=False, soft_wrap=True)
    if u.get("keep_reason"):
        console.print(f"         kept: {u['keep_reason']}", markup=False, soft_wrap=True)


def _show_plan(console: Console, doc: dict[str, Any], verb: str) -> None:
    t = doc["totals"]
    pol = doc["policy"]
    console.print(
        f"{verb} {doc['action']} (policy {pol['name']}, {pol['from']} -> {pol['to']}): {t['units']} units, "
        f"{format_bytes(t['bytes'])}, {t['files']} files; frees {t['units_freed']} "
        f"({format_bytes(t['bytes_freed'])})",
        markup=False,
        soft_wrap=True,
    )
    if doc.get("note"):
        console.print(f"note: {doc['note']}", markup=False, soft_wrap=True)
    for u in doc["units"]:
        _unit_line(console, u)
    for p in doc["passed"]:
        console.print(f"not moved {p['path']}: {p['reason']}", markup=False, soft_wrap=True)


def _show_results(console: Console, results: list[UnitResult], dry_run: bool) -> None:
    for r in results:
        status = ("would move" if r.status == "done" else r.status) if dry_run else r.status
        line = f"{status:<10} {r.action} {r.path}: {r.reason or 'ok'}{_timing(r)}"
        console.print(line, markup=False, soft_wrap=True)


def _timing(r: UnitResult) -> str:
    """` (3.0 GiB in 22.3s, 144 MB/s: copy 14.1s, read_back 6.2s, ...)` for a unit this run moved."""
    total = sum(r.phases.values())
    if not r.phases or not r.bytes or total <= 0:
        return ""
    unit, scale = rate_unit(r.bytes / total)
    laps = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in r.phases.items())
    return f" ({format_bytes(r.bytes)} in {total:.1f}s, {r.bytes / total / scale:.0f} {unit}: {laps})"


@tier_app.callback(epilog=exit_codes(E.ERROR, E.USAGE, E.NOT_FOUND, E.MISMATCH, E.RETRYABLE, E.NO_SPACE))
def tier_command(
    ctx: typer.Context,
    archive: Annotated[
        str | None,
        typer.Option("--archive", metavar="POLICY|PATH", help="Archive what a policy or a path selects."),
    ] = None,
    drain: Annotated[
        str | None,
        typer.Option(
            "--drain",
            metavar="[POLICY|PATH]",
            help="Drain the node-local burst tier to the parallel tier (alone: all of its checkpoints).",
        ),
    ] = None,
    recall: Annotated[
        str | None, typer.Option("--recall", metavar="PATH", help="Bring archived units below PATH back.")
    ] = None,
    policy: Annotated[
        str | None, typer.Option("--policy", metavar="NAME", help="Run a policy by name.")
    ] = None,
    apply: Annotated[
        str | None, typer.Option("--apply", metavar="FILE", help="Carry out exactly this plan file.")
    ] = None,
    plan_out: Annotated[
        str | None,
        typer.Option("--plan-out", metavar="FILE", help="Write the plan for review; move nothing."),
    ] = None,
    tier: Annotated[
        str | None,
        typer.Option("--tier", "-t", metavar="NAME", help="Tier to select on (recall: the stubs' tier)."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", "-n", help="Print the plan; create nothing, not even a lock.")
    ] = False,
    executor: Annotated[
        str | None,
        typer.Option(
            "--executor",
            metavar="local|slurm",
            help="Where the units move: local (here, one by one; the default) or slurm (an "
            "archive, recall or purge: an array, one task per unit, on any node; --drain: one "
            "drain on each of --nodes nodes, a job step).",
        ),
    ] = None,
    nodes: Annotated[
        int | None,
        typer.Option(
            "--nodes",
            metavar="N",
            help="--drain --executor slurm: drain N nodes (default inside an allocation: its nodes).",
        ),
    ] = None,
    slurm_partition: Annotated[
        str | None,
        typer.Option("--slurm-partition", metavar="NAME", help="Slurm partition (--executor slurm)."),
    ] = None,
    slurm_time: Annotated[
        str | None,
        typer.Option(
            "--slurm-time",
            metavar="TIME",
            help="Time limit per array element or drain step (--executor slurm).",
        ),
    ] = None,
    slurm_account: Annotated[
        str | None,
        typer.Option("--slurm-account", metavar="NAME", help="Slurm account of the drain step (--drain)."),
    ] = None,
    node_record: Annotated[
        str | None,
        typer.Option("--node-record", metavar="DIR", hidden=True, help="Set by --drain --executor slurm."),
    ] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Move whole units between tiers by a reviewed plan: drain, archive, recall, purge.

    Units are the complete checkpoints of a run (by their writers' rules) and committed datasets.
    A plan says what moves, its bytes, from where to where and why; --dry-run prints it and
    creates nothing at all. --plan-out FILE writes it; --apply FILE carries out exactly that plan:
    a unit whose files changed since (sizes, mtime, ctime, inode) is skipped with the reason, and a
    plan edited by hand (exit 4), stale or made for other tiers (exit 1) is refused.

    Never freed, whatever a policy says: the newest complete checkpoint of a run, one a tracker or
    `latest` names, anything changed within the area's quiet period, pinned paths. They may be
    copied. Incomplete and in-progress checkpoints are never moved.

    Policies are [policies.NAME] tables in storekit.toml or the layout (README: Tiering).
    The burst tier is node-local: a drain runs on the node that holds it, alone
    or from a Slurm epilog. --drain --executor slurm --nodes N drains N nodes at
    once as one job step (one drain per node); `storekit jobs status` shows each
    node's outcome. An archive, recall or purge can run as a Slurm array
    (--executor slurm): each unit is a task; `storekit jobs status` shows the job,
    `storekit jobs rerun` runs the units that failed or were cut short again.

    \b
    Examples:
      storekit tier --archive old-runs --dry-run
      storekit tier --archive checkpoints/run_001 --plan-out plan.json
      storekit tier --apply plan.json --json
      storekit tier --archive old-runs --executor slurm --slurm-time 4:00:00
      storekit tier --drain
      storekit tier --drain --executor slurm --nodes 2 --slurm-time 30
      storekit tier --recall checkpoints/run_001/step_000100 --dry-run
      storekit tier --policy purge-archived --dry-run --json
    """
    if ctx.invoked_subcommand is not None:
        return
    run = _Run(executor, slurm_partition, slurm_time, nodes=nodes, account=slurm_account)
    if node_record is not None:  # this node's drain, as a task of a drain on every node
        run.node = _node_record(node_record, drain, policy, run)
    try:
        if run.node is not None:
            faults.point("tier.drain-node")  # a node's drain, before anything (tests stop it here)
        with one_line_storage_errors():
            _tier(archive, drain, recall, policy, apply, plan_out, tier, dry_run, json_out, quiet, config,
                  run)  # fmt: skip
    except typer.Exit:
        raise  # the node's report is recorded already (_run)
    except BaseException as exc:
        if run.node is not None:
            run.node.stopped(exc)
        raise


def _node_record(path: str, drain: str | None, policy: str | None, run: _Run) -> Any:
    if (drain is None and policy is None) or run.given():
        raise UsageError("--node-record is given by `tier --drain --executor slurm` to each node's drain")
    from storekit.tier.drainjob import NodeRecord

    return NodeRecord(path)


class _Run:
    """Where the units move (`--executor` and its `--slurm-*` options), looked up once needed."""

    def __init__(
        self,
        executor: str | None,
        partition: str | None,
        time_limit: str | None,
        *,
        nodes: int | None = None,
        account: str | None = None,
    ) -> None:
        self.executor, self.partition, self.time_limit = executor, partition, time_limit
        self.nodes, self.account = nodes, account
        self.node: Any = None  # tier.drainjob.NodeRecord: this drain is a node's task of a job

    def given(self) -> bool:
        return any(v is not None for v in (self.executor, self.partition, self.time_limit, *self.step_only()))

    def step_only(self) -> tuple[int | str | None, ...]:
        """The options only a drain on every node takes."""
        return self.nodes, self.account

    def drain_step(self, site: SiteConfig, config: str | None, what: list[str]) -> Any:
        """The drain on every node `--executor` asks for (cli/tier_drain.py), or None: here."""
        if not self.given():
            return None
        from storekit.cli.tier_drain import drain_launch

        return drain_launch(
            site, config, executor=self.executor, nodes=self.nodes, partition=self.partition,
            time_limit=self.time_limit, account=self.account, what=what,
        )  # fmt: skip

    def job_executor(self, site: SiteConfig, config: str | None, plan: TierPlan) -> Any:
        """None for a run in this process; else the executor the plan's units run on as a job.
        Nothing given: the local run as ever, without importing the job layer (an epilog's drain)."""
        if not self.given():
            return None
        if any(v is not None for v in self.step_only()):
            raise UsageError("--nodes, --slurm-account: for a drain on every node (--drain --executor slurm)")
        from storekit.cli.tier_job import job_executor

        chosen = job_executor(
            self.executor or "local", site, config, partition=self.partition, time_limit=self.time_limit
        )
        if chosen is not None and plan.action == "drain":
            raise UsageError(
                f"--apply: a drain plan is carried out on the node that made it, not as a job "
                f"(--executor {self.executor})",
                hint="storekit tier --drain --executor slurm --nodes N drains every node, each "
                "planning its own",
            )
        return chosen


def _tier(
    archive: str | None,
    drain: str | None,
    recall: str | None,
    policy: str | None,
    apply: str | None,
    plan_out: str | None,
    tier: str | None,
    dry_run: bool,
    json_out: bool,
    quiet: bool,
    config: str | None,
    run: _Run | None = None,
) -> None:
    run = run or _Run(None, None, None)
    out = make_output(json_out, quiet)
    actions = (("archive", archive), ("drain", drain), ("recall", recall))
    chosen = [(n, v) for n, v in actions if v is not None]
    picks = len(chosen) + (policy is not None) + (apply is not None)
    if picks != 1:
        raise UsageError("give exactly one of --archive, --drain, --recall, --policy, --apply")
    if dry_run and plan_out is not None:
        raise UsageError("--dry-run writes nothing: drop --plan-out, or drop --dry-run to write the plan")
    if apply is not None and plan_out is not None:
        raise UsageError("--apply carries out a plan file; --plan-out makes one: give one of them")
    if plan_out is not None and run.given():
        raise UsageError("--plan-out moves nothing: drop --executor and the --slurm-* options")
    site = site_config(config)
    if tier is not None:
        site.tier(tier)  # an unknown --tier is named as given (exit 3), not as a policy key
    if apply is not None:
        _apply_file(out, site, apply, dry_run, run, config)
        return
    action, value = chosen[0] if chosen else ("", None)
    request = _request(site, action or "", value, policy, tier)
    if run.node is not None and request.policy.action != "drain":
        raise UsageError("--node-record: a drain only")
    if request.policy.action == "drain" and run.node is None:
        what = [f"--drain={value}"] if policy is None else ["--policy", policy]
        launch = run.drain_step(site, config, [*what, *(["--tier", tier] if tier else [])])
        if launch is not None:
            _drain_nodes(out, site, launch, dry_run)
            return
    finished = _finish_interrupted(out, site) if not dry_run and plan_out is None else []
    plan = build_plan(site, request)
    doc = plan.to_dict()
    if finished:
        doc["finished_interrupted"] = finished
    executor = run.job_executor(site, config, plan)  # before anything moves: a bad --executor is exit 2
    if dry_run:
        out.result("tier", {**doc, "dry_run": True}, lambda c: _show_plan(c, doc, "would"))
        return
    if plan_out is not None:
        if "://" in plan_out:
            raise UsageError("--plan-out: give a local file")
        if os.path.isdir(plan_out):
            raise UsageError(f"--plan-out {plan_out}: a directory; give a file name")
        data = render_plan(plan, site)
        with storage_errors(f"--plan-out {plan_out}"):
            write_file_atomic(plan_out, data)
        out.result("tier", {**doc, "plan_out": plan_out}, lambda c: _plan_written(c, doc, plan_out))
        return
    _run(out, site, plan, doc, executor, run.node)


def _plan_written(console: Console, doc: dict[str, Any], path: str) -> None:
    _show_plan(console, doc, "plan:")
    then = f"wrote {path}; review it, then: storekit tier --apply {path}"
    console.print(then, markup=False, soft_wrap=True)


def _apply_file(out: Any, site: SiteConfig, path: str, dry_run: bool, run: _Run, config: str | None) -> None:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise NotFoundError(f"plan file {path} does not exist") from None
    except IsADirectoryError:
        raise UsageError(f"--apply {path}: a directory, not a plan file") from None
    plan = load_plan(data, path, site)
    executor = run.job_executor(site, config, plan)
    if dry_run:
        names = {u.dst_tier if u.action == "recall" else u.src_tier for u in plan.units}
        stores = {n: open_store(site.tier(n)) for n in names}
        checked = [check_unit(plan, u, stores, now=time.time()) for u in plan.units]
        results = [
            c
            if isinstance(c, UnitResult)
            else UnitResult(path=c.src_path, action=c.action, reason="unchanged")
            for c in checked
        ]
        doc = {**plan.to_dict(), "dry_run": True, "results": [r.to_dict() for r in results]}
        out.result("tier", doc, lambda c: _show_results(c, results, True))
        return
    finished = _finish_interrupted(out, site)
    doc = {**plan.to_dict(), **({"finished_interrupted": finished} if finished else {})}
    _run(out, site, plan, doc, executor)


def _same_place(fd: int, other: int) -> bool:
    """stdout and stderr are one terminal or one file (`>log 2>&1`, a Slurm log)."""
    try:
        a, b = os.fstat(fd), os.fstat(other)
    except OSError:
        return False
    return (a.st_dev, a.st_ino, a.st_rdev) == (b.st_dev, b.st_ino, b.st_rdev)


def _summary(results: list[UnitResult]) -> str:
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    return f"{len(results)} units: " + ", ".join(f"{n} {status}" for status, n in counts.items())


def _finish_interrupted(out: Any, site: SiteConfig) -> list[str]:
    """Committed moves a kill interrupted are finished first: their units are in no plan any more
    (stub beside the unit, or the unit gone), so a plain rerun is their way forward."""
    from storekit.tier.audit import finish_interrupted
    from storekit.tier.moveunit import journal_dir_for

    try:
        journal = journal_dir_for(site)
    except UsageError:
        return []
    # the journal lives on the shared tier: a stalled metadata server there is exit 5, not a hang
    # (this listing is the command's first call on that tier, before the plan's own guard)
    owner = next(
        (t.name for t in site.tiers.values() if t.local_root and journal.is_relative_to(t.local_root)),
        "journal",
    )
    guard_root(str(journal), owner)
    done = finish_interrupted(journal, site)
    for line in done:
        out.info(f"finished an interrupted move: {line}")
    return done


def _run(
    out: Any, site: SiteConfig, plan: TierPlan, doc: dict[str, Any], executor: Any = None, node: Any = None
) -> None:
    """Move the plan's units here (`executor` None), or as a job on `executor` (tier_job.py);
    `node`: this run is a node's task of a drain on every node, its report recorded there."""
    total = len(plan.units)

    def log(r: UnitResult) -> None:  # one line per unit on stderr: Slurm logs show how far a drain got
        why = f": {r.reason}" if r.reason else ""
        out.info(f"[{len(done) + 1}/{total}] {r.status} {r.action} {r.path}{why}{_timing(r)}")
        done.append(r)

    done: list[UnitResult] = []
    if executor is not None and plan.units:
        from storekit.cli.tier_job import run_job

        results, ran_as = run_job(plan, site, executor, log)
        doc = {**doc, **ran_as}
    else:
        results = apply_plan(plan, site, on_unit=log) if plan.units else []
    code = exit_code_of(results)
    full = {**doc, "dry_run": False, "results": [r.to_dict() for r in results], "exit_code": code}
    bad = [r for r in results if r.status == "failed"]
    first = f"the first: {bad[0].action} {bad[0].path}: {bad[0].reason}" if bad else ""
    if node is not None:
        node.drained(full, code, f"{len(bad)} of {len(results)} move(s) failed, {first}")

    logged = bool(done) and not out.quiet and not out.json_mode and _same_place(1, 2)

    def human(console: Console) -> None:
        _show_plan(console, doc, "plan:")
        if logged:  # each result was just logged where this goes too (a terminal, one Slurm log)
            console.print(_summary(results), markup=False, soft_wrap=True)
        else:
            _show_results(console, results, False)

    out.result("tier", full, human)
    if code:
        out.failed(code, f"{len(bad)} of {len(results)} move(s) failed, {first}")


def _drain_nodes(out: Any, site: SiteConfig, launch: Any, dry_run: bool) -> None:
    """A drain on every node (cli/tier_drain.py): each node's plan and units, as a local drain
    reports its own; exit 0 when every node drained, else the first failed node's code."""
    if dry_run:
        doc = launch.dry_run_doc()
        line = f"would run on {doc['nodes']} nodes (each drains its own burst tier): {' '.join(doc['srun'])}"
        out.result("tier", doc, lambda c: c.print(line, markup=False, soft_wrap=True))
        return
    from storekit.tier.drainjob import job_exit_code

    record, outcomes = launch.run(site, out.info)
    code = job_exit_code(outcomes) or 0
    step = next((s for s in record.work.submissions() if s.extra.get("role") == "step"), None)
    results = [{**r, "node": o["node"]} for o in outcomes for r in (o["report"] or {}).get("results", [])]
    doc = {
        "action": "drain",
        "dry_run": False,
        "executor": launch.executor.name,
        "work_dir": str(record.path),
        "slurm_job_id": step.job_id if step else None,
        "step_id": step.extra.get("step_id") if step else None,
        "nodes": outcomes,
        "results": results,
        "exit_code": code,
    }

    def human(console: Console) -> None:
        for o in outcomes:
            said = f": exit {o['exit_code']}: {o.get('error')}" if o["state"] != "done" else ""
            console.print(f"node {o['node']}: {o['state']}{said}", markup=False, soft_wrap=True)
            report = o["report"]
            if report and report.get("policy"):
                _show_plan(console, report, "  plan:")
                units = [_unit_result(r) for r in report.get("results", [])]
                _show_results(console, units, False)
        moved = sum(o["units_moved"] for o in outcomes)
        total = sum(o["bytes_moved"] for o in outcomes)
        drained = sum(o["state"] == "done" for o in outcomes)
        console.print(
            f"{drained} of {len(outcomes)} nodes drained: {moved} units moved ({format_bytes(total)}); "
            f"record: {record.path}",
            markup=False,
            soft_wrap=True,
        )

    out.result("tier", doc, human)
    if code:
        bad = [o for o in outcomes if o["exit_code"]]
        failed = f"the drain failed on {len(bad)} of {len(outcomes)} nodes, the first: {bad[0]['error']}"
        out.failed(code, failed)


def _unit_result(doc: dict[str, Any]) -> UnitResult:
    return UnitResult(**{**doc, "not_owned": tuple(doc.get("not_owned", ()))})
