"""The options of `storekit bench io`, each declared once (storekit.options).

The command's parameters are built from this table (storekit/cli/bench.py), and so are the spec's
defaults and values (storekit/bench/spec.py: `DEFAULTS`, `build_spec`, the ranges `validate`
checks). An option with a `field` fills the BenchSpec; the others steer the command itself.
"""

from __future__ import annotations

from typing import Any

from storekit.options import WORKERS_HELP, Option
from storekit.readers import (
    read_bool,
    read_duration,
    read_int,
    read_int_list,
    read_number,
    read_size,
    read_size_list,
)
from storekit.units import SIZE_HELP

PATTERNS = ("shards", "checkpoint", "tokens", "meta")


def read_patterns(value: Any) -> tuple[str, ...]:
    """`all` or a comma-separated list (each name is checked with the spec's other rules)."""
    text = str(value).strip()
    return PATTERNS if text == "all" else tuple(p.strip() for p in text.split(",") if p.strip())


IO_OPTIONS: tuple[Option, ...] = (
    Option(
        name="pattern",
        flags=("--pattern", "-p"),
        default="all",
        help=f"{', '.join(PATTERNS)} (comma-separated) or all.",
        field="patterns",
        read=read_patterns,
    ),
    Option(
        name="target",
        flags=("--target",),
        metavar="PATH|s3://BUCKET/PREFIX",
        help=(
            "Benchmark this directory or bucket/prefix instead of a tier. S3 credentials come "
            "from the environment or AWS config and are never printed."
        ),
    ),
    Option(
        name="endpoint_url",
        flags=("--endpoint-url",),
        metavar="URL",
        help="S3 endpoint (e.g. a Ceph RGW http://rgw:7480). Default: the tier's, or $AWS_ENDPOINT_URL.",
    ),
    Option(
        name="size",
        flags=("--size",),
        default="256M",
        cli_default=None,  # not given: the default, raised to one --file-size file per shards worker
        metavar="SIZE",
        help=(
            "Bytes per phase: the shard and token data sets, and the checkpoint sample all ranks "
            "write together. Default: 256MiB, raised to one --file-size file per shards worker. "
            f"{SIZE_HELP}"
        ),
        field="size",
        read=read_size,
    ),
    Option(
        name="file_size",
        flags=("--file-size",),
        default="32M",
        metavar="SIZE",
        help=f"Size of each shard file (shards, tokens). {SIZE_HELP}",
        field="file_size",
        read=read_size,
    ),
    Option(
        name="workers",
        flags=("--workers", "-w"),
        default="1,4",
        metavar="N[,N...]",
        help=f"{WORKERS_HELP} on each node, one I/O process each; a list sweeps, e.g. 1,2,4,8.",
        field="workers",
        read=read_int_list,
        bounds=(1, 4096),
    ),
    Option(
        name="block_size",
        flags=("--block-size", "-b"),
        default="1M",
        metavar="SIZE[,SIZE...]",
        help=(
            "I/O size per request (S3: part/read size); a list sweeps, e.g. 1M,4M. Multiples of "
            f"4K with O_DIRECT. {SIZE_HELP}"
        ),
        field="block_sizes",
        read=read_size_list,
    ),
    Option(
        name="queue_depth",
        flags=("--queue-depth",),
        default="1,32",
        help="tokens: requests in flight per worker (io_uring); a list sweeps, e.g. 1,8,32,128.",
        field="queue_depths",
        read=read_int_list,
        bounds=(1, 4096),
    ),
    Option(
        name="duration",
        flags=("--duration",),
        default="1",
        help="tokens: seconds per sweep point, e.g. 1, 10s, 2m.",
        field="duration",
        read=read_duration,
        bounds=(0.05, 86400),
    ),
    Option(
        name="repeat",
        flags=("--repeat", "-r"),
        type=int,
        default=3,
        help="Repeats of every point; the median and spread are reported.",
        field="repeat",
        read=read_int,
        bounds=(1, 1000),
    ),
    Option(
        name="direct",
        flags=("--direct/--no-direct",),
        type=bool,
        default=True,
        help=(
            "O_DIRECT on POSIX (bypass the page cache). Refusal by the filesystem is detected and "
            "reported. On FUSE mounts only the kernel's cache is bypassed (see above)."
        ),
        field="direct",
        read=read_bool,
    ),
    Option(
        name="drop_caches",
        flags=("--drop-caches/--no-drop-caches",),
        type=bool,
        default=False,  # the node's whole cache is co-tenants' too: only on request
        help=(
            "Also drop the whole node's page cache, dentries and inodes before read phases (root "
            "only; every other process on the node loses its cache too). Default: only the run's "
            "own files are evicted (posix_fadvise DONTNEED), checked with mincore; --json says "
            "what was done (honesty.eviction, honesty.drop_caches)."
        ),
        field="drop_caches",
        read=read_bool,
    ),
    Option(
        name="model",
        flags=("--model",),
        default="7b",
        help=(
            "checkpoint: model preset (1b, 3b, 7b, 8b, 13b, 34b, 70b, 405b) or a parameter count "
            "such as 3.2b, 350m."
        ),
        field="model",
    ),
    Option(
        name="ranks",
        flags=("--ranks",),
        type=int,
        default=8,
        help="checkpoint: ranks writing their share at once (one process each).",
        field="ranks",
        read=read_int,
        bounds=(1, 4096),
    ),
    Option(
        name="bytes_per_param",
        flags=("--bytes-per-param",),
        type=float,
        default=2.0,
        help="checkpoint: bytes per weight (2 = bf16).",
        field="model",
        read=read_number,
    ),
    Option(
        name="optimizer_bytes_per_param",
        flags=("--optimizer-bytes-per-param",),
        type=float,
        default=12.0,
        help=(
            "checkpoint: optimizer state per parameter (12 = Adam: fp32 master + 2 moments; 0 = "
            "weights only)."
        ),
        field="model",
        read=read_number,
    ),
    Option(
        name="full_checkpoint",
        flags=("--full-checkpoint",),
        type=bool,
        default=False,
        help="checkpoint: write the whole model checkpoint instead of a --size sample.",
        field="full_checkpoint",
        read=read_bool,
    ),
    Option(
        name="seq_len",
        flags=("--seq-len",),
        type=int,
        default=4096,
        help="tokens: tokens per training window.",
        field="seq_len",
        read=read_int,
        bounds=(1, 1 << 24),
    ),
    Option(
        name="token_bytes",
        flags=("--token-bytes",),
        type=int,
        default=2,
        help="tokens: bytes per token (2 for vocabularies < 65536, 4 above).",
        field="token_bytes",
        read=read_int,
        bounds=(1, 1 << 20),
    ),
    Option(
        name="files",
        flags=("--files",),
        type=int,
        default=500,
        help="meta: small files (objects) per worker.",
        field="files",
        read=read_int,
        bounds=(1, 10_000_000),
    ),
    Option(
        name="small_file_size",
        flags=("--small-file-size",),
        default="4k",
        metavar="SIZE",
        help=f"meta: bytes written to each small file (0 = empty, as mdtest). {SIZE_HELP}",
        field="small_file_size",
        read=read_size,
        bounds=(0, 64 * 1024 * 1024),
    ),
    Option(
        name="seed",
        flags=("--seed",),
        type=int,
        default=0,
        help="Seed for random offsets and data (results are reproducible).",
        field="seed",
        read=read_int,
    ),
    Option(
        name="gpu_tokens_per_s",
        flags=("--gpu-tokens-per-s",),
        type=float,
        help="Verdict: tokens/s one GPU consumes. Default: 400 TFLOP/s / (6 x parameters) of --model.",
        field="gpu_tokens_per_s",
        read=read_number,
    ),
    Option(
        name="gpus",
        flags=("--gpus",),
        type=int,
        help="Verdict: GPUs the dataset bandwidth must feed. Default: --ranks.",
        field="gpus",
        read=read_int,
        bounds=(1, 10_000_000),
    ),
    Option(
        name="target_checkpoint_s",
        flags=("--target-checkpoint-s",),
        type=float,
        default=60.0,
        help="Verdict: longest acceptable checkpoint save, seconds.",
        field="target_checkpoint_s",
        read=read_number,
    ),
    Option(
        name="prometheus",
        flags=("--prometheus",),
        metavar="FILE",
        help="Also write the results as a Prometheus textfile (atomically), for node_exporter.",
    ),
    Option(
        name="plot",
        flags=("--plot",),
        metavar="FILE.png",
        help=(
            "Also plot throughput vs workers / block size / queue depth and the time series "
            "(needs storekit[plot])."
        ),
    ),
    Option(
        name="executor",
        flags=("--executor",),
        default="local",
        metavar="local|slurm",
        help=(
            "local: workers on this machine. slurm: one agent per node started with srun "
            "(--nodes N; inside an sbatch/salloc allocation its nodes, else srun asks Slurm "
            "for them); --workers is then per node and --ranks is spread over the nodes."
        ),
    ),
    Option(
        name="nodes",
        flags=("--nodes", "-N"),
        type=int,
        default=1,
        cli_default=None,  # --executor slurm without --nodes: the allocation's
        help="slurm: nodes to run on (default: the allocation's).",
        field="nodes",
        read=read_int,
        bounds=(1, 4096),
    ),
    Option(
        name="partition",
        flags=("--slurm-partition", "--partition"),
        metavar="NAME",
        help="slurm, outside an allocation: partition.",
    ),
    Option(
        name="time_limit",
        flags=("--slurm-time", "--time-limit"),
        metavar="TIME",
        help="slurm, outside an allocation: srun --time, e.g. 30 or 1:00:00.",
    ),
    Option(
        name="account",
        flags=("--slurm-account", "--account"),
        metavar="NAME",
        help="slurm, outside an allocation: account to charge.",
    ),
    Option(
        name="connect_timeout",
        flags=("--slurm-connect-timeout",),
        type=float,
        metavar="SECONDS",
        help="slurm: how long the agents have to connect once their job step runs, counted "
        "again from the first one's connection (default 300).",
    ),
    Option(
        name="coordinator_address",
        flags=("--coordinator-address",),
        metavar="HOST",
        help="slurm: address the agents connect back to (default: this host's).",
    ),
    Option(
        name="print_schema",
        flags=("--print-schema",),
        type=bool,
        default=False,
        help="Print the --json document layout and exit.",
    ),
)
