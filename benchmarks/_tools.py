"""The contenders of bench_prepare.py: how each one is launched, and what it produced.

Every runner gets the same corpus, the same tokenizer.json, the same core set (taskset) and the same
worker count, and returns a dict with the measurement plus an independent count of the tokens it
wrote (read back from its output files, see _tokfiles.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from _measure import Measurement, run_measured
from _tokfiles import TokenSummary, find_megatron_shards, natural_key, summarise_datatrove, summarise_megatron

HERE = Path(__file__).resolve().parent
WORK = HERE / ".work"
EOS = "<EOT>"


@dataclass
class Setup:
    corpus: Path  # one jsonl (Megatron and the ceiling read this)
    parts_dir: Path  # the same bytes split into part-*.jsonl (storekit and datatrove read the glob)
    tokenizer_json: Path
    tokenizer_dir: Path  # tokenizer.json + tokenizer_config.json (Megatron / transformers)
    eos_id: int
    out_root: Path
    storekit_cmd: list[str]
    storekit_env: dict[str, str]
    datatrove_python: Path
    megatron_python: Path
    megatron_tree: Path
    ceiling_python: Path
    interval: float
    ceiling_batch: int
    datatrove_args: list[str]


def cpus_for(n: int) -> str:
    return f"0-{n - 1}" if n > 1 else "0"


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAYON_", "TOKENIZERS_", "OMP_"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def _fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def _fail(name: str, m: Measurement) -> RuntimeError:
    tail = (m.stderr or m.stdout)[-3000:]
    return RuntimeError(f"{name} failed (exit {m.returncode}): {shlex.join(m.cmd)}\n{tail}")


def _row(m: Measurement, tokens: int, summary: TokenSummary | None, **extra: object) -> dict[str, object]:
    row: dict[str, object] = {
        "wall_s": m.wall_s,
        "cpu_s": m.cpu_s,
        "tokens": tokens,
        "tokens_per_s": tokens / m.wall_s if m.wall_s else 0.0,
        "tokens_per_cpu_s": tokens / m.cpu_s if m.cpu_s else 0.0,
        "peak_tree_rss": m.peak_tree_rss,
        "peak_tree_pss": m.peak_tree_pss,
        "peak_single_rss": m.peak_single_rss,
        "max_processes": m.max_processes,
        "cmd": shlex.join(m.cmd),
        "harness_cpu_s": m.extra.get("harness_cpu_s"),
    }
    if summary is not None:
        row["files"] = summary.__dict__
    row.update(extra)
    return row


def _manifest_order(out: Path, shards: list[Path]) -> list[Path]:
    """Shards in the order the manifest lists them (if it lists them), else natural name order."""
    manifests = sorted(out.rglob("manifest.json"))
    if not manifests:
        return shards
    try:
        doc = json.loads(manifests[0].read_text())
    except (OSError, ValueError):
        return shards
    names: list[str] = []
    entries = doc.get("files", []) if isinstance(doc, dict) else []
    for e in entries if isinstance(entries, list) else []:
        name = e.get("path") or e.get("name") if isinstance(e, dict) else e
        if isinstance(name, str) and name.endswith(".idx"):
            names.append(name)
    by_name = {
        str(p.relative_to(manifests[0].parent)): p for p in shards if p.is_relative_to(manifests[0].parent)
    }
    ordered = [by_name[n] for n in names if n in by_name]
    return ordered if len(ordered) == len(shards) else shards


def _find_number(doc: object, keys: tuple[str, ...]) -> int | None:
    """First integer value under any of `keys`, searching nested dicts (storekit's --json summary)."""
    if isinstance(doc, dict):
        for k in keys:
            if isinstance(doc.get(k), int):
                return int(doc[k])
        for v in doc.values():
            found = _find_number(v, keys)
            if found is not None:
                return found
    return None


def run_storekit(
    s: Setup,
    workers: int,
    tag: str,
    *,
    dedup: bool = False,
    corpus_glob: str | None = None,
    summarise: bool = True,
    engine: str | None = None,
    threads_per_process: int | None = None,
) -> dict[str, object]:
    """`threads_per_process`: override how many worker threads share a process (default: storekit's
    choice, one per process for the fast engine)."""
    out = s.out_root / f"storekit-{tag}"
    work = s.out_root / f"storekit-{tag}.work"
    shutil.rmtree(out, ignore_errors=True)
    _fresh(work)
    glob = corpus_glob or str(s.parts_dir / "*.jsonl")
    cmd = [
        *s.storekit_cmd,
        "prepare",
        "dataset",
        "--input",
        glob,
        "--format",
        "jsonl",
        "--text-key",
        "text",
        "--tokenizer",
        str(s.tokenizer_json),
        "--eos",
        "--dedup" if dedup else "--no-dedup",
        "--name",
        "bench",
        "--kind",
        "text",
        "--version",
        "v1",
        "--output",
        str(out),
        "--workers",
        str(workers),
        "--work-dir",
        str(work),
        "--force",
        "--json",
        "--quiet",
        *(["--tokenizer-engine", engine] if engine else []),
    ]
    cpus = cpus_for(workers)
    # cwd: a folder with no storekit/ in it (`python -m` puts the cwd first on sys.path, before PYTHONPATH)
    env = dict(s.storekit_env)
    if threads_per_process is not None:
        env["STOREKIT_THREADS_PER_PROCESS"] = str(threads_per_process)
    prep = run_measured(cmd, env=env, cwd=str(s.out_root), cpus=cpus, interval=s.interval)
    if prep.returncode != 0:
        raise _fail("storekit prepare dataset", prep)
    verify = run_measured(
        [*s.storekit_cmd, "dataset", "verify", str(out), "--json"],
        env=s.storekit_env,
        cwd=str(s.out_root),
        cpus=cpus,
        interval=s.interval,
    )
    if verify.returncode != 0:
        raise _fail("storekit dataset verify", verify)
    try:
        reported: object = json.loads(prep.stdout)
    except ValueError:
        reported = {"unparsed_stdout": prep.stdout[-2000:]}
    summary = None
    tokens = _find_number(reported, ("tokens", "total_tokens")) or 0
    if summarise:
        summary = summarise_megatron(_manifest_order(out, find_megatron_shards(out)), s.eos_id)
        tokens = summary.tokens
    wall = prep.wall_s + verify.wall_s
    cpu = prep.cpu_s + verify.cpu_s
    row = _row(prep, tokens, summary)
    row.update(
        wall_s=wall,
        cpu_s=cpu,
        tokens_per_s=tokens / wall,
        tokens_per_cpu_s=tokens / cpu if cpu else 0.0,
        prepare_wall_s=prep.wall_s,
        prepare_cpu_s=prep.cpu_s,
        prepare_tokens_per_s=tokens / prep.wall_s,
        verify_wall_s=verify.wall_s,
        verify_cpu_s=verify.cpu_s,
        peak_tree_rss=max(prep.peak_tree_rss, verify.peak_tree_rss),
        peak_tree_pss=max(prep.peak_tree_pss, verify.peak_tree_pss),
        peak_single_rss=max(prep.peak_single_rss, verify.peak_single_rss),
        reported_tokens=_find_number(reported, ("tokens", "total_tokens")),
        reported_docs=_find_number(reported, ("docs", "documents")),
        storekit_json=reported,
        verify_cmd=shlex.join(verify.cmd),
        workers=workers,
        cpus=cpus,
        dedup=dedup,
        engine=_find_engine(reported),
        shard_sha256=_tree_sha256(out),
    )
    return row


def _find_engine(reported: object) -> str | None:
    timings = reported.get("timings") if isinstance(reported, dict) else None
    return str(timings.get("engine")) if isinstance(timings, dict) else None


def _tree_sha256(out: Path) -> str:
    """sha256 over every shard file's bytes (manifest excluded: it has a timestamp and the engine)."""
    digest = hashlib.sha256()
    for path in sorted(out.rglob("*")):
        if path.is_file() and path.name != "manifest.json":
            digest.update(path.relative_to(out).as_posix().encode() + b"\0")
            with open(path, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    digest.update(chunk)
    return digest.hexdigest()


def run_datatrove(s: Setup, workers: int, tag: str) -> dict[str, object]:
    work = _fresh(s.out_root / f"datatrove-{tag}.work")
    out = s.out_root / f"datatrove-{tag}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [
        str(s.datatrove_python),
        str(HERE / "peers" / "datatrove_tokenize.py"),
        "--input-dir",
        str(s.parts_dir),
        "--glob",
        "*.jsonl",
        "--tokenizer",
        str(s.tokenizer_json),
        "--eos",
        EOS,
        "--workers",
        str(workers),
        "--work",
        str(work),
        "--output",
        str(out),
        *s.datatrove_args,
    ]
    m = run_measured(cmd, env=base_env(), cpus=cpus_for(workers), interval=s.interval)
    if m.returncode != 0:
        raise _fail("datatrove", m)
    steps = json.loads(m.stdout.strip().splitlines()[-1])
    summary = summarise_datatrove(sorted(out.glob("*.ds"), key=natural_key), s.eos_id)
    return _row(m, summary.tokens, summary, steps=steps, workers=workers, cpus=cpus_for(workers))


def run_megatron(s: Setup, workers: int, tag: str) -> dict[str, object]:
    out = _fresh(s.out_root / f"megatron-{tag}")
    cmd = [
        str(s.megatron_python),
        "tools/preprocess_data.py",
        "--input",
        str(s.corpus),
        "--json-keys",
        "text",
        "--output-prefix",
        str(out / "meg"),
        "--tokenizer-type",
        "HuggingFaceTokenizer",
        "--tokenizer-model",
        str(s.tokenizer_dir),
        "--tokenizer-hf-use-fast",
        "--append-eod",
        "--workers",
        str(workers),
        "--log-interval",
        "1000000",
    ]
    env = base_env(PYTHONPATH=str(s.megatron_tree), PYTHONWARNINGS="ignore")
    m = run_measured(cmd, env=env, cwd=str(s.megatron_tree), cpus=cpus_for(workers), interval=s.interval)
    if m.returncode != 0:
        raise _fail("megatron preprocess_data.py", m)
    summary = summarise_megatron(find_megatron_shards(out), s.eos_id)
    return _row(m, summary.tokens, summary, workers=workers, cpus=cpus_for(workers))


def run_ceiling(s: Setup, threads: int, modes: list[str], dataset_tokens: int | None) -> dict[str, object]:
    """One process, all modes; per-mode rows. tokens/s use content tokens + one EOS per document."""
    cmd = [
        str(s.ceiling_python),
        str(HERE / "peers" / "ceiling.py"),
        "--input",
        str(s.corpus),
        "--tokenizer",
        str(s.tokenizer_json),
        "--batch",
        str(s.ceiling_batch),
        "--modes",
        ",".join(modes),
    ]
    env = base_env(RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
    m = run_measured(cmd, env=env, cpus=cpus_for(threads), interval=s.interval)
    if m.returncode != 0:
        raise _fail("ceiling", m)
    res = json.loads(m.stdout.strip().splitlines()[-1])
    rows: dict[str, object] = {}
    for mode, r in res["modes"].items():
        tokens = int(r["content_tokens"]) + int(res["docs"])
        rows[mode] = {
            "wall_s": r["wall_s"],
            "cpu_s": r["cpu_s"],
            "tokens": tokens,
            "tokens_per_s": tokens / r["wall_s"],
            "tokens_per_cpu_s": tokens / r["cpu_s"] if r["cpu_s"] else 0.0,
            "peak_tree_rss": m.peak_tree_rss,
            "peak_tree_pss": m.peak_tree_pss,
            "peak_single_rss": m.peak_single_rss,
            "threads": threads,
            "cpus": cpus_for(threads),
            "batch": res["batch"],
            "load_s": res["load_s"],
            "cmd": shlex.join(m.cmd),
            "harness_cpu_s": m.extra.get("harness_cpu_s"),
            "tokens_match_dataset": dataset_tokens is None or tokens == dataset_tokens,
        }
    return rows
