"""The `storekit bench io --json` document, version 1: every field, its type and meaning.

Compatibility: fields are only added within a version; renaming or removing one, or changing its
meaning, bumps BENCH_SCHEMA_VERSION. Rates are per second, sizes in bytes, latencies in milliseconds,
times ISO 8601 UTC. `storekit bench io --print-schema` prints this table; `validate` checks a document.

Besides the fields below the CLI envelope adds `schema_version` (of the CLI's JSON output) and
`command` ("bench io").
"""

from __future__ import annotations

from typing import Any

BENCH_SCHEMA = "storekit.bench.io"
BENCH_SCHEMA_VERSION = 1

NUM = (int, float)
OPT_NUM = (int, float, type(None))
OPT_STR = (str, type(None))

# name -> (accepted types, description, nested fields for dicts / list items)
MEDIAN_SPREAD: dict[str, Any] = {
    "median": (OPT_NUM, "median over repeats", None),
    "min": (OPT_NUM, "smallest repeat", None),
    "max": (OPT_NUM, "largest repeat", None),
    "spread": (OPT_NUM, "(max - min) / median", None),
    "modes": (
        (list, type(None)),
        "when the repeats fall into groups separated by a 3x jump: each group's median, count, min "
        "and max, smallest first (the overall median of a bimodal measurement jumps between them); "
        "null otherwise",
        None,
    ),
}
LATENCY: dict[str, Any] = {
    "count": (int, "operations timed", None),
    "mean_ms": (OPT_NUM, "exact mean", None),
    "min_ms": (OPT_NUM, "exact minimum", None),
    "p50_ms": (OPT_NUM, "median, from the histogram merged over workers (and repeats)", None),
    "p90_ms": (OPT_NUM, "90th percentile", None),
    "p99_ms": (OPT_NUM, "99th percentile", None),
    "p99_9_ms": (OPT_NUM, "99.9th percentile", None),
    "max_ms": (OPT_NUM, "exact maximum", None),
}
PHASE_RESULT: dict[str, Any] = {
    "phase": (
        str,
        "write, read, randread, create, stat, read, delete (POSIX) or put/list/head/get/delete (S3)",
        None,
    ),
    "op": (str, "worker operation", None),
    "workers": (int, "workers that ran", None),
    "bytes": (int, "bytes moved, equal to the plan for size-based phases", None),
    "ops": (int, "operations (I/O requests, files or objects)", None),
    "elapsed_s": (NUM, "last finish - first start", None),
    "bandwidth_bytes_per_s": (NUM, "bytes / elapsed_s", None),
    "ops_per_s": (NUM, "ops / elapsed_s", None),
    "stonewall": (
        dict,
        "rates while all workers were active: window_s, bandwidth_bytes_per_s, ops_per_s, note",
        None,
    ),
    "latency": (dict, "per-operation latency", LATENCY),
    "series": (
        list,
        "buckets of series_bucket_s from the first start: t_s (bucket start), bytes_per_s, ops_per_s",
        None,
    ),
    "series_bucket_s": (NUM, "series bucket: 1 s, finer (down to 0.01 s) for phases under 50 s", None),
    "stragglers": (
        list,
        "per worker: worker, host, bytes, ops, start_offset_s, elapsed_s, bandwidth_bytes_per_s, "
        "ops_per_s, p99_ms, slowdown, straggler, cpu_pct_of_core",
        None,
    ),
    "cpu": (
        dict,
        "benchmark CPU: user_s, sys_s, cores_used, max_worker_pct_of_core, max_worker_user_pct_of_core",
        None,
    ),
    "direct": ((bool, type(None)), "O_DIRECT in effect for every worker (null: not applicable)", None),
    "engine": (str, "psync, io_uring, threads, posix, boto3, boto3-threads", None),
    "notes": (list, "worker notes, e.g. O_DIRECT refused", None),
    "window": (str, "what each operation's timed window covers, and where it differs from fio's", None),
    "settle_s": (
        NUM,
        "untimed: the longest a worker spent syncing the target's filesystem before the start "
        "barrier, so work left by earlier phases is not timed in this one (0 on S3)",
        None,
    ),
}
SUMMARY: dict[str, Any] = {
    "repeats": (int, "repeats summarised", None),
    "bandwidth_bytes_per_s": (dict, "median and spread of bandwidth", MEDIAN_SPREAD),
    "ops_per_s": (dict, "median and spread of operation rate", MEDIAN_SPREAD),
    "stonewall_bandwidth_bytes_per_s": (dict, "median and spread of the all-active rate", MEDIAN_SPREAD),
    "stonewall_ops_per_s": (dict, "median and spread of the all-active operation rate", MEDIAN_SPREAD),
    "elapsed_s": (dict, "median and spread of phase duration", MEDIAN_SPREAD),
    "latency": (dict, "percentiles from the histogram merged over all workers and repeats", LATENCY),
    "cpu_cores_used": (dict, "benchmark CPU in cores", MEDIAN_SPREAD),
    "max_worker_pct_of_core": (
        NUM,
        "the busiest worker's CPU (user+sys) as % of one core (near 100: CPU-bound)",
        None,
    ),
    "max_worker_user_pct_of_core": (NUM, "that worker's user-space (Python) share, % of one core", None),
    "stragglers": (int, "worker runs over all repeats that took >20% longer than the median worker", None),
    "direct": ((bool, type(None)), "O_DIRECT in effect in every repeat", None),
    "engine": (str, "I/O engine", None),
}
PHASE: dict[str, Any] = {
    "phase": (str, "phase name", None),
    "op": (str, "worker operation", None),
    "planned_bytes_per_repeat": (OPT_NUM, "bytes the plan says this phase moves (null: time-based)", None),
    "summary": (dict, "over repeats", SUMMARY),
    "cache": (
        list,
        "per repeat, before read phases: dropped (node-wide, --drop-caches), reason, evicted_files "
        "(this run's, fadvise), resident_before (mincore)",
        None,
    ),
    "repeats": (list, "one phase result per repeat", PHASE_RESULT),
    "nodes": (
        list,
        "only with --executor slurm on 2+ nodes: per node (median over repeats) node, workers, "
        "bytes, ops, bandwidth_bytes_per_s, ops_per_s, elapsed_s (that node's first start to last "
        "finish), p99_ms; the summary above is the aggregate of all nodes",
        None,
    ),
}
OPTIONAL = frozenset({"nodes"})  # present only in some runs; checked when present
POINT: dict[str, Any] = {
    "pattern": (str, "shards, checkpoint, tokens or meta", None),
    "params": (dict, "the sweep point: workers/ranks, block_size, queue_depth, dirs...", None),
    "label": (str, "the point in words", None),
    "phases": (list, "phases in run order", PHASE),
}
DOCUMENT: dict[str, Any] = {
    "schema": (str, f"always {BENCH_SCHEMA!r}", None),
    "bench_schema_version": (int, "version of this layout", None),
    "run_id": (str, "names the scratch directory scratch/storekit-bench-<run_id>", None),
    "started_at": (str, "ISO 8601 UTC", None),
    "finished_at": (str, "ISO 8601 UTC", None),
    "duration_s": (NUM, "wall time of the run", None),
    "config_hash": (str, "sha256 (16 hex) of the parameters: equal hash, comparable runs", None),
    "parameters": (dict, "every option that shapes the numbers (no credentials)", None),
    "environment": (
        dict,
        "storekit_version, hostname, kernel, os, python, cpus, ram_bytes, target, filesystem "
        "(fs_type, source, mount_options, super_options), device (name, model, rotational, scheduler, "
        "max_sectors_kb, max_segments), memory_backed, transparent_hugepages, io_uring; "
        "small_file_timer {timer: c or python, reason} when meta runs on POSIX; endpoint_url and "
        "bucket for S3; with --executor slurm: nodes [{node (SLURMD_NODENAME), rank, host, clock "
        "{offset_ns, rtt_ns, uncertainty_ns, samples, corrected}, free_bytes, direct, environment}] "
        "(this document's own fields describe the coordinator's host)",
        None,
    ),
    "honesty": (
        dict,
        "direct {requested, effective, reason}, drop_caches {requested, done, reason} (the node-wide "
        "drop, only with --drop-caches), eviction {method, verified_with, files_evicted, "
        "max_resident_before} (the run's own files); with --executor slurm the probe, drop and "
        "eviction ran on every node, and clocks {method, max_abs_offset_ns, max_uncertainty_ns}",
        None,
    ),
    "plan": (dict, "run_dir, peak_bytes, space_needed_bytes, notes", None),
    "setup": (
        list,
        "untimed-for-verdict phases that wrote data read later (the token data set)",
        PHASE_RESULT,
    ),
    "results": (list, "one entry per sweep point", POINT),
    "verdict": (dict, "checkpoint {save_s, load_s, pass...}, data [{source, gpus_fed, pass...}], pass", None),
    "cleanup": (
        dict,
        "removed_files, leftovers (paths that could not be removed), reclaimed (run dirs of this "
        "user's dead earlier runs removed first: run_dir, pid, bytes, why); with --executor slurm "
        "nodes [{node, run_dir_gone}]: each node's own view that the run directory is gone",
        None,
    ),
    "warnings": (list, "honesty warnings: cache, O_DIRECT, RAM size, CPU-bound workers", None),
}


def validate(doc: Any, fields: dict[str, Any] = DOCUMENT, where: str = "") -> list[str]:
    """Problems with `doc` against the layout above (missing fields, wrong types); [] when valid."""
    problems: list[str] = []
    if not isinstance(doc, dict):
        return [f"{where or 'document'}: expected an object"]
    for name, (types, _, nested) in fields.items():
        path = f"{where}.{name}" if where else name
        if name not in doc:
            if name not in OPTIONAL:
                problems.append(f"{path}: missing")
            continue
        value = doc[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in _as_tuple(types)):
            problems.append(f"{path}: expected {_type_names(types)}, got {type(value).__name__}")
            continue
        if nested and isinstance(value, dict):
            problems += validate(value, nested, path)
        elif nested and isinstance(value, list):
            for i, item in enumerate(value):
                problems += validate(item, nested, f"{path}[{i}]")
    return problems


def _as_tuple(types: Any) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def _type_names(types: Any) -> str:
    return " or ".join("null" if t is type(None) else t.__name__ for t in _as_tuple(types))


def describe(fields: dict[str, Any] = DOCUMENT, indent: str = "") -> list[str]:
    """The layout as indented text lines (for --print-schema)."""
    lines = []
    for name, (types, text, nested) in fields.items():
        lines.append(f"{indent}{name} ({_type_names(types)}): {text}")
        if nested:
            lines += describe(nested, indent + "    ")
    return lines


def describe_json(fields: dict[str, Any] = DOCUMENT) -> dict[str, Any]:
    """The layout as data (for --print-schema --json): name -> type, description, nested fields."""
    out: dict[str, Any] = {}
    for name, (types, text, nested) in fields.items():
        entry: dict[str, Any] = {"type": _type_names(types), "description": text}
        if nested:
            entry["fields"] = describe_json(nested)
        out[name] = entry
    return out
