"""CLI for `storekit bench io`: one command for bring-up I/O benchmarks, with numbers you can trust."""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from storekit.bench.spec import DEFAULTS, PATTERNS, TargetSpec, build_spec
from storekit.cli.common import (
    WORKERS_HELP,
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
from storekit.cli.output import ProgressHandle
from storekit.config import refuse_url_credentials
from storekit.errors import ExitCode, UsageError
from storekit.places import resolve_place, tier_place
from storekit.store import S3Store
from storekit.units import SIZE_HELP, format_bytes

if TYPE_CHECKING:
    from storekit.bench.cluster.launch import AgentSrunOptions
    from storekit.bench.plan import BenchPlan

bench_app = noun_app("bench", "Benchmark storage the way training uses it.")

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
size spread over the nodes. Results: per node and the aggregate.

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


def io(
    pattern: Annotated[
        str, typer.Option("--pattern", "-p", help=f"{', '.join(PATTERNS)} (comma-separated) or all.")
    ] = DEFAULTS["pattern"],
    target: Annotated[
        str | None,
        typer.Option(
            "--target",
            metavar="PATH|s3://BUCKET/PREFIX",
            help=(
                "Benchmark this directory or bucket/prefix instead of a tier. S3 credentials come "
                "from the environment or AWS config and are never printed."
            ),
        ),
    ] = None,
    endpoint_url: Annotated[
        str | None,
        typer.Option(
            "--endpoint-url",
            metavar="URL",
            help="S3 endpoint (e.g. a Ceph RGW http://rgw:7480). Default: the tier's, or $AWS_ENDPOINT_URL.",
        ),
    ] = None,
    size: Annotated[
        str | None,
        typer.Option(
            "--size",
            metavar="SIZE",
            help=(
                "Bytes per phase: the shard and token data sets, and the checkpoint sample all ranks "
                "write together. Default: 256MiB, raised to one --file-size file per shards worker. "
                f"{SIZE_HELP}"
            ),
            show_default=False,
        ),
    ] = None,
    file_size: Annotated[
        str,
        typer.Option(
            "--file-size", metavar="SIZE", help=f"Size of each shard file (shards, tokens). {SIZE_HELP}"
        ),
    ] = DEFAULTS["file_size"],
    workers: Annotated[
        str,
        typer.Option(
            "--workers",
            "-w",
            metavar="N[,N...]",
            help=f"{WORKERS_HELP} on each node, one I/O process each; a list sweeps, e.g. 1,2,4,8.",
        ),
    ] = DEFAULTS["workers"],
    block_size: Annotated[
        str,
        typer.Option(
            "--block-size",
            "-b",
            metavar="SIZE[,SIZE...]",
            help=(
                "I/O size per request (S3: part/read size); a list sweeps, e.g. 1M,4M. Multiples of "
                f"4K with O_DIRECT. {SIZE_HELP}"
            ),
        ),
    ] = DEFAULTS["block_size"],
    queue_depth: Annotated[
        str,
        typer.Option(
            "--queue-depth",
            help="tokens: requests in flight per worker (io_uring); a list sweeps, e.g. 1,8,32,128.",
        ),
    ] = DEFAULTS["queue_depth"],
    duration: Annotated[
        str, typer.Option("--duration", help="tokens: seconds per sweep point, e.g. 1, 10s, 2m.")
    ] = DEFAULTS["duration"],
    repeat: Annotated[
        int,
        typer.Option("--repeat", "-r", help="Repeats of every point; the median and spread are reported."),
    ] = DEFAULTS["repeat"],
    direct: Annotated[
        bool,
        typer.Option(
            "--direct/--no-direct",
            help=(
                "O_DIRECT on POSIX (bypass the page cache). Refusal by the filesystem is detected and "
                "reported. On FUSE mounts only the kernel's cache is bypassed (see above)."
            ),
        ),
    ] = DEFAULTS["direct"],
    drop_caches: Annotated[
        bool,
        typer.Option(
            "--drop-caches/--no-drop-caches",
            help=(
                "Also drop the whole node's page cache, dentries and inodes before read phases (root "
                "only; every other process on the node loses its cache too). Default: only the run's "
                "own files are evicted (posix_fadvise DONTNEED), checked with mincore; --json says "
                "what was done (honesty.eviction, honesty.drop_caches)."
            ),
        ),
    ] = DEFAULTS["drop_caches"],
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help=(
                "checkpoint: model preset (1b, 3b, 7b, 8b, 13b, 34b, 70b, 405b) or a parameter count "
                "such as 3.2b, 350m."
            ),
        ),
    ] = DEFAULTS["model"],
    ranks: Annotated[
        int, typer.Option("--ranks", help="checkpoint: ranks writing their share at once (one process each).")
    ] = DEFAULTS["ranks"],
    bytes_per_param: Annotated[
        float, typer.Option("--bytes-per-param", help="checkpoint: bytes per weight (2 = bf16).")
    ] = DEFAULTS["bytes_per_param"],
    optimizer_bytes_per_param: Annotated[
        float,
        typer.Option(
            "--optimizer-bytes-per-param",
            help=(
                "checkpoint: optimizer state per parameter (12 = Adam: fp32 master + 2 moments; 0 = "
                "weights only)."
            ),
        ),
    ] = DEFAULTS["optimizer_bytes_per_param"],
    full_checkpoint: Annotated[
        bool,
        typer.Option(
            "--full-checkpoint",
            help="checkpoint: write the whole model checkpoint instead of a --size sample.",
        ),
    ] = DEFAULTS["full_checkpoint"],
    seq_len: Annotated[int, typer.Option("--seq-len", help="tokens: tokens per training window.")] = DEFAULTS[
        "seq_len"
    ],
    token_bytes: Annotated[
        int,
        typer.Option("--token-bytes", help="tokens: bytes per token (2 for vocabularies < 65536, 4 above)."),
    ] = DEFAULTS["token_bytes"],
    files: Annotated[int, typer.Option("--files", help="meta: small files (objects) per worker.")] = DEFAULTS[
        "files"
    ],
    small_file_size: Annotated[
        str,
        typer.Option(
            "--small-file-size",
            metavar="SIZE",
            help=f"meta: bytes written to each small file (0 = empty, as mdtest). {SIZE_HELP}",
        ),
    ] = DEFAULTS["small_file_size"],
    seed: Annotated[
        int, typer.Option("--seed", help="Seed for random offsets and data (results are reproducible).")
    ] = DEFAULTS["seed"],
    gpu_tokens_per_s: Annotated[
        float | None,
        typer.Option(
            "--gpu-tokens-per-s",
            help="Verdict: tokens/s one GPU consumes. Default: 400 TFLOP/s / (6 x parameters) of --model.",
        ),
    ] = DEFAULTS["gpu_tokens_per_s"],
    gpus: Annotated[
        int | None,
        typer.Option("--gpus", help="Verdict: GPUs the dataset bandwidth must feed. Default: --ranks."),
    ] = DEFAULTS["gpus"],
    target_checkpoint_s: Annotated[
        float,
        typer.Option("--target-checkpoint-s", help="Verdict: longest acceptable checkpoint save, seconds."),
    ] = DEFAULTS["target_checkpoint_s"],
    prometheus: Annotated[
        str | None,
        typer.Option(
            "--prometheus",
            metavar="FILE",
            help="Also write the results as a Prometheus textfile (atomically), for node_exporter.",
        ),
    ] = None,
    plot: Annotated[
        str | None,
        typer.Option(
            "--plot",
            metavar="FILE.png",
            help=(
                "Also plot throughput vs workers / block size / queue depth and the time series "
                "(needs storekit[plot])."
            ),
        ),
    ] = None,
    executor: Annotated[
        str,
        typer.Option(
            "--executor",
            metavar="local|slurm",
            help=(
                "local: workers on this machine. slurm: one agent per node started with srun "
                "(--nodes N; inside an sbatch/salloc allocation its nodes, else srun asks Slurm "
                "for them); --workers is then per node and --ranks is spread over the nodes."
            ),
        ),
    ] = "local",
    nodes: Annotated[
        int | None,
        typer.Option("--nodes", "-N", help="slurm: nodes to run on (default: the allocation's)."),
    ] = None,
    partition: Annotated[
        str | None,
        typer.Option(
            "--slurm-partition",
            "--partition",
            metavar="NAME",
            help="slurm, outside an allocation: partition.",
        ),
    ] = None,
    time_limit: Annotated[
        str | None,
        typer.Option(
            "--slurm-time",
            "--time-limit",
            metavar="TIME",
            help="slurm, outside an allocation: srun --time, e.g. 30 or 1:00:00.",
        ),
    ] = None,
    account: Annotated[
        str | None,
        typer.Option(
            "--slurm-account",
            "--account",
            metavar="NAME",
            help="slurm, outside an allocation: account to charge.",
        ),
    ] = None,
    connect_timeout: Annotated[
        float | None,
        typer.Option(
            "--slurm-connect-timeout",
            metavar="SECONDS",
            help="slurm: how long the agents have to connect once their job step runs, counted "
            "again from the first one's connection (default 300).",
        ),
    ] = None,
    coordinator_address: Annotated[
        str | None,
        typer.Option(
            "--coordinator-address",
            metavar="HOST",
            help="slurm: address the agents connect back to (default: this host's).",
        ),
    ] = None,
    print_schema: Annotated[
        bool, typer.Option("--print-schema", help="Print the --json document layout and exit.")
    ] = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
    tier: TierOpt = None,
    dry_run: DryRunOpt = False,
) -> None:
    # the engines, numpy and the report load here, not for every storekit command (~0.2 s)
    from storekit.bench import schema
    from storekit.bench.cluster.launch import (
        check_nodes,
        launch,
        processes_per_node,
        refuse_unsupported,
        srun_command,
    )
    from storekit.bench.cluster.suite import ClusterSuite
    from storekit.bench.patterns import build_plan, peak_bytes
    from storekit.bench.plan import space_needed
    from storekit.bench.report import build_document, require_matplotlib, write_plot, write_prometheus
    from storekit.bench.scratch import PosixScratch, open_scratch
    from storekit.bench.suite import Suite, now_run_id
    from storekit.bench.verdict import judge
    from storekit.cli.bench_tables import render_human

    out = make_output(json_out, quiet)
    if print_schema:
        doc = {
            "schema": schema.BENCH_SCHEMA,
            "bench_schema_version": schema.BENCH_SCHEMA_VERSION,
            "fields": schema.describe_json(),
        }
        out.result("bench io", doc, lambda console: console.print("\n".join(schema.describe()), markup=False))
        return
    if plot:
        require_matplotlib()
    slurm = _slurm_options(
        executor, nodes, partition, time_limit, account, coordinator_address, connect_timeout
    )
    spec = build_spec(
        _target(config, tier, target, endpoint_url),
        pattern=pattern,
        size=size,
        file_size=file_size,
        workers=workers,
        block_size=block_size,
        queue_depth=queue_depth,
        duration=duration,
        repeat=repeat,
        direct=direct,
        drop_caches=drop_caches,
        model=model,
        ranks=ranks,
        bytes_per_param=bytes_per_param,
        optimizer_bytes_per_param=optimizer_bytes_per_param,
        full_checkpoint=full_checkpoint,
        seq_len=seq_len,
        token_bytes=token_bytes,
        files=files,
        small_file_size=small_file_size,
        seed=seed,
        gpu_tokens_per_s=gpu_tokens_per_s,
        gpus=gpus,
        target_checkpoint_s=target_checkpoint_s,
        nodes=slurm.nodes if slurm else 1,
    )
    if slurm:
        refuse_unsupported(spec.target.kind)
        slurm = replace(slurm, processes_per_node=processes_per_node(spec))
        cpus = check_nodes(slurm)  # no srun, no controller, too few nodes: refused before any write
    run_id = now_run_id()
    scratch = open_scratch(spec.target, run_id)
    if not dry_run:  # what our killed predecessors left counts as free space again
        for gone in scratch.reclaim_dead():
            out.info(f"removed {gone['run_dir']}: left by an earlier bench run whose process is gone")
    if spec.target.kind == "posix" or not dry_run:
        # before any planning, also for --dry-run (it only reads): a 1P run is refused in microseconds
        scratch.check(space_needed(peak_bytes(spec)))
    plan = build_plan(spec, run_id, scratch.run_root)
    if dry_run:
        data = {
            "dry_run": True,
            "config_hash": spec.config_hash(),
            "parameters": spec.parameters(),
            "plan": plan.to_dict(),
            "would_reclaim": scratch.reclaimable(),
        }
        if slurm:
            data["launch"] = {"executor": "slurm", "srun": srun_command(slurm, "COORDINATOR:PORT", cpus)}
        out.result("bench io", data, lambda console: _render_plan(console, plan))
        return
    with contextlib.ExitStack() as stack:
        bars: list[ProgressHandle] = []

        def advance(done: int, total: int) -> None:
            if not bars:  # opened when the phases start, after the checks (an error before: no bar)
                bars.append(stack.enter_context(out.progress("bench io", total=total, unit="phases")))
            bars[0].advance(1 if done else 0)

        if slurm:
            assert isinstance(scratch, PosixScratch)
            with launch(slurm, out.info) as cluster:
                run = ClusterSuite(plan, scratch, cluster, progress=advance, warn=out.warn).run()
            run["cleanup"]["nodes"] = cluster.cleanup
        else:
            run = Suite(plan, scratch, progress=advance, warn=out.warn).run()
    doc = build_document(plan, run, judge(spec, run["points"]))
    if prometheus:
        write_prometheus(prometheus, doc)
    if plot:
        write_plot(plot, doc)
    out.result("bench io", doc, lambda console: render_human(console, doc))


def _slurm_options(
    executor: str,
    nodes: int | None,
    partition: str | None,
    time_limit: str | None,
    account: str | None,
    coordinator_address: str | None,
    connect_timeout: float | None = None,
) -> AgentSrunOptions | None:
    from storekit.bench.cluster.launch import CONNECT_AFTER_START_S, AgentSrunOptions, in_allocation
    from storekit.executors.base import executor_names

    if executor not in executor_names():  # the registered executors (bench runs agents of its own)
        raise UsageError(f"--executor {executor!r}: expected {' or '.join(executor_names())}")
    slurm_only = {"--nodes": nodes, "--slurm-partition": partition, "--slurm-time": time_limit,
                  "--slurm-account": account, "--coordinator-address": coordinator_address,
                  "--slurm-connect-timeout": connect_timeout}  # fmt: skip
    if connect_timeout is not None and connect_timeout <= 0:
        raise UsageError(f"--slurm-connect-timeout {connect_timeout:g}: expected a number of seconds above 0")
    if executor == "local":
        given = [name for name, value in slurm_only.items() if value is not None]
        if given:
            raise UsageError(f"{given[0]} needs --executor slurm")
        return None
    if nodes is None:
        if not in_allocation():
            raise UsageError("--executor slurm needs --nodes N outside an sbatch/salloc allocation")
        nodes = int(os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or 1)
    return AgentSrunOptions(nodes=nodes, partition=partition, time_limit=time_limit, account=account,
                        coordinator_address=coordinator_address,
                        connect_timeout=connect_timeout or CONNECT_AFTER_START_S)  # fmt: skip


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
    bench_app.command("io", help=IO_HELP, epilog=codes)(io)
    agent_codes = exit_codes(E.ERROR, E.RETRYABLE)
    bench_app.command("agent", hidden=True, help=AGENT_HELP, epilog=agent_codes)(agent)
    app.add_typer(bench_app, name="bench")
