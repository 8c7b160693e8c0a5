"""CLI for `storekit bench io`: one command for bring-up I/O benchmarks, with numbers you can trust."""

from __future__ import annotations

import contextlib
import os
from types import SimpleNamespace
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from storekit.bench.options import IO_OPTIONS
from storekit.bench.spec import TargetSpec, build_spec
from storekit.cli.common import exit_codes, make_output, noun_app, site_config
from storekit.cli.declared import declared_command
from storekit.cli.output import ProgressHandle
from storekit.config import refuse_url_credentials
from storekit.errors import ExitCode, UsageError
from storekit.options import CONFIG, DRY_RUN, JSON, QUIET, TIER, spec_values
from storekit.places import resolve_place, tier_place
from storekit.store import S3Store
from storekit.units import format_bytes

if TYPE_CHECKING:
    from storekit.bench.plan import BenchPlan

bench_app = noun_app("bench", "Benchmark storage the way training uses it.")
# every option of `bench io`, in the order its help lists them
IO_TABLE = (*IO_OPTIONS, JSON, QUIET, CONFIG, TIER, DRY_RUN)

IO_HELP = """Measure whether storage can feed training and absorb checkpoints.

\b
Patterns, each on a POSIX directory or an S3 bucket/prefix:
  shards      W workers write large shard files (fsync included),
              then stream them back
  checkpoint  N ranks write their share of a model checkpoint at once
              (fsync timed), then read it back; sizes from --model and
              --ranks; the slowest rank sets the time
  tokens      random reads of training windows (--seq-len x
              --token-bytes) at each --queue-depth
  meta        create/stat/read/delete small files in per-worker and
              shared directories (mdtest-like); put/list/head/get/delete
              small objects on S3
  all         all of the above: the bring-up suite (default)

Method: workers are processes started together on a barrier; bandwidth
is bytes / (last finish - first start), with the rate while all workers
were active and a per-worker straggler table. O_DIRECT with aligned
buffers by default (a refusal is detected and reported); before reads
the run's own files are evicted from the page cache (posix_fadvise
DONTNEED, checked with mincore), never the node's whole cache unless
--drop-caches (root) asks for it; no process reads what it wrote; --repeat gives median and
spread; latency percentiles come from merged histograms; the
benchmark's own CPU use is shown so a Python ceiling is not taken for a
storage ceiling. Small-file operations are timed in C (compiled with
the system's cc on first use, cached in ~/.cache/storekit; set
STOREKIT_BENCH_NATIVE=0 to time them in Python, which adds ~0.5 us).

Windows (what is timed; --json says it per phase as "window"): as
fio's where fio has the operation. A write phase creates its files
empty before the start, then times each file from its open through
the writes and fsync to its close (fio rw=write end_fsync=1); stat
and delete time the call alone (fio filestat/filedelete). Different
on purpose: create times open, write of the payload and close (fio's
filecreate times only the open). Before each phase every worker
syncs the target's filesystem, untimed ("settle_s"), so work left by
the previous phase is not timed in the next. Repeats that fall into
separate modes (a 3x jump) are listed per mode, not as one median.

Safety: writes only under <target>/scratch/storekit-bench-<run-id>/,
removed afterwards, also on Ctrl-C; refused before writing when free
space is short. A run killed outright (SIGKILL, OOM, node crash) leaves
its directory; the next run on the same host by the same user removes
it once its owner process is provably gone (POSIX targets; --json:
cleanup.reclaimed). Other users' and other hosts' runs are never touched.

Several nodes (--executor slurm --nodes N): one agent per node, started
once with srun --ntasks-per-node=1: inside an sbatch/salloc allocation
on its nodes, else srun asks Slurm for N nodes (--slurm-partition,
--slurm-time, --slurm-account) and waits for them. The agents connect back
to this command over TCP (--coordinator-address); once their job step has
started, and again once the first has connected, they have
--slurm-connect-timeout seconds (300) or the run stops (exit 5) naming
each node whose agent did not. It needs the target
mounted too; it must be a shared filesystem. Workers wait on a two-level
barrier (local, then all nodes); a node that fails, dies or falls silent
stops every node before cleanup. Clock offsets are measured at the
handshake and corrected; O_DIRECT, free space, the environment and cache
eviction are checked on every node; reads are shifted by a node so no
node reads what it wrote. --workers is per node, --ranks is the world
size spread over the nodes. Results: per node and the aggregate. The
run is a job: `storekit jobs status` shows it (running, done with its
result, failed naming the node, or cancelled) and its Slurm job.

O_DIRECT on FUSE mounts (ceph-fuse, s3fs, ...): only the kernel's
page cache is bypassed; every request then goes through the daemon
behind the mount, which decides itself whether it caches (ceph-fuse
has its own client cache; s3fs buffers whole objects). FUSE accepts
unaligned O_DIRECT (no EINVAL, checked on ceph-fuse), so no refusal is
reported there, and large requests are cut to the mount's max_write.
So --direct on FUSE measures the daemon and the network, not only the
disks; the kernel client (mount -t ceph) is the closer comparison.

Sizes: k, M, G, T and KiB, MiB, GiB are binary (as in fio); KB, MB, GB
are decimal.

\b
Examples:
  storekit bench io                         # suite on the default tier
  storekit bench io --target /lustre/storage --pattern shards \\
      --workers 1,4,16 --block-size 1M,4M
  storekit bench io --pattern checkpoint --model 70b --ranks 64 \\
      --size 64G --target-checkpoint-s 120
  storekit bench io --pattern tokens --queue-depth 1,8,32,128 --duration 10
  storekit bench io --target s3://bench/storage \\
      --endpoint-url http://rgw:7480 --pattern meta --files 2000
  storekit bench io --json --prometheus /var/lib/node_exporter/sk.prom \\
      --plot bench.png
  storekit bench io --executor slurm --nodes 2 --slurm-partition cpu \\
      --target /lustre/storage --pattern shards,checkpoint --ranks 16
"""

AGENT_HELP = """Run one node's part of a multi-node bench io (srun starts it).

Not for direct use: `bench io --executor slurm` starts one agent per node
with srun and the run's one-time token in the environment; the agent
connects back, serves the run and exits.

\b
Examples:
  storekit bench agent --connect 10.0.0.5:41234
"""


def _target(config: str | None, tier: str | None, target: str | None, endpoint_url: str | None) -> TargetSpec:
    """--target (a directory or s3://bucket/prefix, no site config needed) or --tier, through the one
    resolver in storekit.places."""
    refuse_url_credentials(endpoint_url or "", "--endpoint-url")
    if tier and target:
        raise UsageError("give either --tier or --target, not both")
    if endpoint_url and not (target or "").startswith("s3://") and target:
        raise UsageError("--endpoint-url applies to s3:// targets only")
    if target:
        s3_options = {"endpoint_url": endpoint_url} if endpoint_url else {}
        place = resolve_place(target, None, bare="cwd", s3_options=s3_options, what="--target")
    else:
        place = tier_place(site_config(config), tier)
    store = place.store
    options = dict(store.tier.options) if place.tier_name else {}
    if isinstance(store, S3Store):
        return TargetSpec(
            kind="s3",
            root="/".join(p for p in (store.root, place.rel) if p),
            endpoint_url=endpoint_url or options.get("endpoint_url"),
            tier=place.tier_name,
            s3_options=options,
        )
    return TargetSpec(
        kind="posix", root=os.path.join(store.root, place.rel).rstrip("/") or "/", tier=place.tier_name
    )


def io(o: SimpleNamespace) -> None:
    """`bench io` with what was given, one attribute per option of IO_TABLE."""
    # the engines, numpy and the report load here, not for every storekit command (~0.2 s)
    from storekit.bench import schema
    from storekit.bench.patterns import build_plan, peak_bytes
    from storekit.bench.plan import space_needed
    from storekit.bench.report import build_document, require_matplotlib, write_plot, write_prometheus
    from storekit.bench.scratch import open_scratch
    from storekit.bench.suite import now_run_id
    from storekit.bench.verdict import judge
    from storekit.cli.bench_tables import render_human
    from storekit.executors.base import phase_runner

    out = make_output(o.json_out, o.quiet)
    if o.print_schema:
        doc = {
            "schema": schema.BENCH_SCHEMA,
            "bench_schema_version": schema.BENCH_SCHEMA_VERSION,
            "fields": schema.describe_json(),
        }
        out.result("bench io", doc, lambda console: console.print("\n".join(schema.describe()), markup=False))
        return
    if o.plot:
        require_matplotlib()
    settings = _launch_settings(o.executor, {
        "--nodes": o.nodes, "--slurm-partition": o.partition, "--slurm-time": o.time_limit,
        "--slurm-account": o.account, "--coordinator-address": o.coordinator_address,
        "--slurm-connect-timeout": o.connect_timeout,
    })  # fmt: skip
    target = _target(o.config, o.tier, o.target, o.endpoint_url)
    # the executor's registered phase runner: workers here (local) or one agent per node (slurm)
    runner = phase_runner(o.executor, target.kind, **settings)
    spec = build_spec(target, **(spec_values(IO_OPTIONS, vars(o)) | {"nodes": runner.nodes}))
    runner.check(spec)  # e.g. no srun, no controller, too few nodes: refused before any write
    run_id = now_run_id()
    scratch = open_scratch(spec.target, run_id)
    if not o.dry_run:  # what our killed predecessors left counts as free space again
        for gone in scratch.reclaim_dead():
            out.info(f"removed {gone['run_dir']}: left by an earlier bench run whose process is gone")
    if spec.target.kind == "posix" or not o.dry_run:
        # before any planning, also for --dry-run (it only reads): a 1P run is refused in microseconds
        scratch.check(space_needed(peak_bytes(spec)))
    plan = build_plan(spec, run_id, scratch.run_root)
    if o.dry_run:
        data = {
            "dry_run": True,
            "config_hash": spec.config_hash(),
            "parameters": spec.parameters(),
            "plan": plan.to_dict(),
            "would_reclaim": scratch.reclaimable(),
            **runner.dry_run_fields(),
        }
        out.result("bench io", data, lambda console: _render_plan(console, plan))
        return
    with contextlib.ExitStack() as stack:
        bars: list[ProgressHandle] = []

        def advance(done: int, total: int) -> None:
            if not bars:  # opened when the phases start, after the checks (an error before: no bar)
                bars.append(stack.enter_context(out.progress("bench io", total=total, unit="phases")))
            bars[0].advance(1 if done else 0)

        def document(run: dict[str, Any]) -> dict[str, Any]:
            return build_document(plan, run, judge(spec, run["points"]))

        doc = runner.run_suite(
            plan, scratch, progress=advance, warn=out.warn, info=out.info, document=document
        )
    if o.prometheus:
        write_prometheus(o.prometheus, doc)
    if o.plot:
        write_plot(o.plot, doc)
    out.result("bench io", doc, lambda console: render_human(console, doc))


def _launch_settings(executor: str, given: dict[str, Any]) -> dict[str, Any]:
    """What the phase runner of `executor` is made with, from the launch options given (flag ->
    value): one it does not take names the executors that do."""
    from storekit.executors.base import executor_names, phase_runner_names, phase_runner_type

    if executor not in executor_names():  # the registered executors
        raise UsageError(f"--executor {executor!r}: expected {' or '.join(executor_names())}")
    runner = phase_runner_type(executor)
    for flag, value in given.items():
        if value is not None and flag not in runner.launch_options:
            takers = [n for n in phase_runner_names() if flag in phase_runner_type(n).launch_options]
            raise UsageError(f"{flag} needs --executor {' or '.join(takers)}")
    settings: dict[str, Any] = runner.settings(given)
    return settings


def agent(
    connect: Annotated[str, typer.Option("--connect", metavar="HOST:PORT", help="The coordinator.")],
) -> None:
    from storekit.bench.cluster.agent import main

    # SystemExit, not typer.Exit: Click hands typer.Exit's 130 back as a return value, which the
    # CLI reads as an unexplained interrupt and adds "error: interrupted"; the agent has already
    # said why it stopped, and the coordinator reports the run's one error
    raise SystemExit(main(connect))


def _render_plan(console: Console, plan: BenchPlan) -> None:
    spec = plan.spec
    console.print(f"plan for {spec.target.display} (dry run: nothing is written)")
    peak, needed = format_bytes(plan.peak_bytes), format_bytes(plan.space_needed)
    console.print(f"run directory: {plan.run_rel}/  peak space {peak}, needs {needed} free")
    for setup in plan.setups:
        ph = setup.phase
        moved = format_bytes(ph.bytes or 0)
        console.print(
            f"  {setup.pattern:<10} setup  {ph.name:<8} {len(ph.tasks)} workers  {ph.files} files  {moved}"
        )
    for point in plan.points:
        for ph in point.phases:
            moved = "time-based" if ph.bytes is None else format_bytes(ph.bytes)
            who = f"{len(ph.tasks)} workers  {ph.files} files"
            line = f"  {point.pattern:<10} {point.label:<32} {ph.name:<8} {who}  {moved}  x{spec.repeat}"
            console.print(line, markup=False)
    for note in plan.notes:
        console.print(f"note: {note}", markup=False)


def register(app: typer.Typer) -> None:
    E = ExitCode
    codes = exit_codes(E.ERROR, E.USAGE, E.NOT_FOUND, E.RETRYABLE, E.NO_SPACE, E.INTERRUPTED)
    bench_app.command("io", help=IO_HELP, epilog=codes)(declared_command(IO_TABLE, io))
    agent_codes = exit_codes(E.ERROR, E.RETRYABLE)
    bench_app.command("agent", hidden=True, help=AGENT_HELP, epilog=agent_codes)(agent)
    app.add_typer(bench_app, name="bench")
