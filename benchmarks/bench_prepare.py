#!/usr/bin/env python3
"""Side-by-side throughput of `storekit prepare dataset` against datatrove, Megatron-LM and the ceiling.

One run, one corpus, one core set. In every round each contender runs once, in an order rotated from
round to round (so drift on a shared machine hits all of them alike); medians and spreads over
--repeat rounds, after --warmup-rounds untimed ones (the first run after a pause read its inputs from
disk: this VM's DAMON reclaim pages out page-cache pages idle for 60 s); ratios with PASS/FAIL
against the targets; a markdown block for RESULTS.md.

Contenders (N = --workers, default: all cores; each pinned with `taskset -c 0-(N-1)`):
  storekit      `storekit prepare dataset --input 'parts/*.jsonl' --tokenizer tokenizer.json --eos
                 --no-dedup --workers N` (raw files -> final shards + manifest.json), then
                 `storekit dataset verify --json`;
                 timed separately, reported combined ("final verified shards"). Dedup is OFF (the peers don't
                 dedup); --dedup-row adds a row with it on.
  storekit-w1   the same with --workers 1 on one core: parallel efficiency = tps(N) / (N * tps(1)),
                 both end to end (process start, plan with its sample check, tasks, finalize, and
                 `dataset verify`), each pinned to its cores: what a user waiting for verified shards
                 gets from N cores. The serial parts count against it. The phase table splits each
                 run's wall time (from prepare's --json timings) and shows the tasks' efficiency alone
                 (informational, not the target).
  datatrove     JsonlReader('parts/*.jsonl') -> DocumentTokenizer(tokenizer.json, eos_token=<EOT>) with
                 LocalPipelineExecutor(tasks=N, workers=N), then DocumentTokenizerMerger (tasks=1) to reach
                 one set of final files; datatrove's defaults otherwise (batch_size=10000 docs, shuffling).
  megatron      Megatron-LM tools/preprocess_data.py --input corpus.jsonl --workers N --append-eod,
                 HuggingFaceTokenizer from the same tokenizer.json (<EOT> as eos), offline.
  ceiling       tokenizers' own encode_batch / encode_batch_fast (with and without `[e.ids for e in ...]`)
                 of all texts held in memory, RAYON_NUM_THREADS=N; the fastest mode is the ceiling.
  ceiling-w1    the fastest-ids mode on 1 thread / 1 core (Rayon scaling, per-core rate).

Tokens are counted independently from every tool's output files; storekit's token stream is compared
with Megatron's (same tokenizer, EOS appended, no dedup: it must be the same stream) byte for byte,
and with datatrove's as a multiset of documents (datatrove shuffles). tokens/s use the same token
count for everyone (content tokens + one EOS per document). CPU seconds are user+sys of the whole
process tree; peak memory is sampled from /proc over the tree (sum of RSS, sum of PSS, largest single
process).

--memory-check also runs storekit once on a corpus with a few giant documents and on a 3x corpus and
checks that the peak stays under 1 GiB.

The whole run holds the machine-wide lock /tmp/storekit-bench.lock (the same lock flock(1) takes).

Examples:
  python3 benchmarks/bench_prepare.py --storekit-cmd "/tmp/venv/bin/python -m storekit"
  python3 benchmarks/bench_prepare.py --repeat 3 --memory-check
  python3 benchmarks/bench_prepare.py --tools datatrove,megatron,ceiling --limit-mb 20 --repeat 1
  python3 benchmarks/bench_prepare.py --tools storekit --storekit-tree before=/tmp/old \
      --storekit-tree after=.      # two storekit trees in one run: the refactor's before/after ratio
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _measure import become_subreaper, byte_compile
from _tools import HERE, WORK, Setup, base_env, run_ceiling, run_datatrove, run_megatron, run_storekit

LOCK = "/tmp/storekit-bench.lock"
GIB = 1024**3
# issue 15: the fast tokenizer engine; the ceiling target is 2.0 (aim 3.0)
TARGETS = {"datatrove": 3.0, "megatron": 1.6, "ceiling": 2.0, "efficiency": 0.9}
ALL_TOOLS = [
    "storekit",
    "storekit-w1",
    "storekit-threads",
    "storekit-hf",
    "datatrove",
    "megatron",
    "ceiling",
    "ceiling-w1",
]
CEILING_MODES = ["encode_batch", "encode_batch+ids", "encode_batch_fast", "encode_batch_fast+ids"]
_lock_file = None


def hold_lock() -> str:
    """Take /tmp/storekit-bench.lock for the whole run, unless an ancestor (`flock LOCK cmd`) holds it."""
    global _lock_file
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == LOCK:
                return "held by the parent (flock)"
        except OSError:
            continue
    _lock_file = open(LOCK, "a")  # noqa: SIM115 - held until exit
    try:
        fcntl.flock(_lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"bench: waiting for {LOCK} (another benchmark is running)", file=sys.stderr, flush=True)
        fcntl.flock(_lock_file, fcntl.LOCK_EX)
    return "taken"


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def storekit_version(args: argparse.Namespace, where: str | None = None) -> str:
    """The commit storekit runs from (PYTHONPATH checkout), with '+dirty' for uncommitted changes."""
    where = where or args.storekit_pythonpath or str(HERE.parent)
    try:
        head = subprocess.run(
            ["git", "-C", where, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "-C", where, "status", "--porcelain", "storekit"], capture_output=True, text=True
        )
        branch = subprocess.run(
            ["git", "-C", where, "branch", "--show-current"], capture_output=True, text=True
        )
    except OSError:
        return "?"
    return (
        f"{branch.stdout.strip()}@{head.stdout.strip()}{'+dirty' if dirty.stdout.strip() else ''} ({where})"
    )


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def ensure_corpus(args: argparse.Namespace) -> tuple[Path, Path, dict[str, object]]:
    corpus: Path = args.corpus or WORK / "corpus" / f"corpus-{args.size_mb:g}mb.jsonl"
    if not corpus.exists():
        log(f"building {corpus} with make_corpus.py")
        subprocess.run(
            [
                sys.executable,
                str(HERE / "make_corpus.py"),
                "--size-mb",
                f"{args.size_mb:g}",
                "--out",
                str(corpus),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    if args.limit_mb:  # a prefix of the corpus, for quick checks of the harness
        small = WORK / "corpus" / f"{corpus.stem}.first{args.limit_mb:g}mb.jsonl"
        if not small.exists():
            with open(corpus, "rb") as src, open(small, "wb") as dst:
                budget = int(args.limit_mb * 1_000_000)
                for line in src:
                    dst.write(line)
                    budget -= len(line)
                    if budget <= 0:
                        break
        corpus = small
    stats_path = Path(str(corpus) + ".stats.json")
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else {}
    parts = split_parts(corpus, args.parts)
    return corpus, parts, stats


def split_parts(corpus: Path, count: int) -> Path:
    """The same bytes as `corpus`, cut at line boundaries into `count` files of about equal size."""
    parts = corpus.with_name(corpus.stem + f".parts{count}")
    done = parts / ".complete"
    if done.exists():
        return parts
    parts.mkdir(parents=True, exist_ok=True)
    per = corpus.stat().st_size / count
    with open(corpus, "rb") as src:
        i, written = 0, 0
        out = open(parts / f"part-{i:05d}.jsonl", "wb")  # noqa: SIM115
        for line in src:
            if written >= per * (i + 1) and i < count - 1:
                out.close()
                i += 1
                out = open(parts / f"part-{i:05d}.jsonl", "wb")  # noqa: SIM115
            out.write(line)
            written += len(line)
        out.close()
    done.write_text(f"{count}\n")
    return parts


def make_setup(args: argparse.Namespace, corpus: Path, parts: Path) -> Setup:
    tok_dir = WORK / "tokenizer"
    tok_json = tok_dir / "tokenizer.json"
    found = sorted(WORK.glob("megatron-*/tools/preprocess_data.py"))
    megatron_tree = (
        Path(args.megatron_tree) if args.megatron_tree else (found[-1].parent.parent if found else WORK)
    )
    if not tok_json.exists():
        raise SystemExit(f"bench: {tok_json} missing: run benchmarks/setup_peers.sh first")
    storekit_env = base_env()
    if args.storekit_pythonpath:
        storekit_env["PYTHONPATH"] = args.storekit_pythonpath
    eos = next(t["id"] for t in json.loads(tok_json.read_text())["added_tokens"] if t["content"] == "<EOT>")
    return Setup(
        corpus=corpus,
        parts_dir=parts,
        tokenizer_json=tok_json,
        tokenizer_dir=tok_dir,
        eos_id=eos,
        out_root=args.out_root,
        storekit_cmd=shlex.split(args.storekit_cmd),
        storekit_env=storekit_env,
        datatrove_python=WORK / "venv-datatrove" / "bin" / "python",
        megatron_python=WORK / "venv-megatron" / "bin" / "python",
        megatron_tree=megatron_tree,
        ceiling_python=Path(args.ceiling_python),
        interval=args.sample_interval,
        ceiling_batch=args.ceiling_batch,
        datatrove_args=shlex.split(args.datatrove_args),
    )


def compile_bytecode(s: Setup, trees: list[str]) -> str:
    """The storekit trees under test byte-compiled (_measure.byte_compile); says which were."""
    done = [t for t in trees if t and (Path(t) / "storekit").is_dir()]
    for tree in done:
        byte_compile(s.storekit_cmd[0], tree)
    return (
        f"byte-compiled before timing: {', '.join(done)}" if done else "installed copy (compiled at install)"
    )


# ---------------------------------------------------------------- statistics and report


def med(rows: list[dict[str, object]], key: str) -> float:
    return float(statistics.median(float(r[key]) for r in rows))  # type: ignore[arg-type]


def spread(rows: list[dict[str, object]], key: str) -> str:
    vals = [float(r[key]) for r in rows]  # type: ignore[arg-type]
    m = statistics.median(vals)
    return f"±{(max(vals) - min(vals)) / 2 / m * 100:.1f}%" if m and len(vals) > 1 else "-"


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def summarise(results: dict[str, list[dict[str, object]]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name, rows in results.items():
        if not rows:
            continue
        out[name] = {
            k: med(rows, k)
            for k in (
                "wall_s",
                "cpu_s",
                "tokens",
                "tokens_per_s",
                "tokens_per_cpu_s",
                "peak_tree_rss",
                "peak_tree_pss",
                "peak_single_rss",
            )
        }
        out[name]["max_peak_tree_rss"] = max(float(r["peak_tree_rss"]) for r in rows)  # type: ignore[arg-type]
        out[name]["load"] = med(rows, "loadavg_before")
        out[name]["rounds"] = len(rows)
    return out


def tree_option(value: str) -> tuple[str, str]:
    label, sep, where = value.partition("=")
    if not sep or not label or not where:
        raise SystemExit(f"bench: --storekit-tree wants LABEL=PATH, not {value!r}")
    return label, str(Path(where).resolve())


def tree_ratios(
    summary: dict[str, dict[str, float]], results: dict[str, list[dict[str, object]]], labels: list[str]
) -> list[tuple[str, float, float, str, str]]:
    """Each later tree against the first: PASS while it is not slower by more than the spread."""
    out: list[tuple[str, float, float, str, str]] = []
    names = [f"storekit@{label}" for label in labels if f"storekit@{label}" in summary]
    for name in names[1:]:
        base = names[0]
        v = summary[name]["tokens_per_s"] / summary[base]["tokens_per_s"]
        noise = max(_half_range(results[base]), _half_range(results[name]), 0.02)
        pairs = [
            float(x["tokens_per_s"]) / float(y["tokens_per_s"])
            for x, y in zip(results[name], results[base], strict=False)
        ]
        rng = f"{min(pairs):.2f}–{max(pairs):.2f}" if pairs else "-"
        verdict = "PASS" if v >= 1 - noise else "FAIL"
        out.append((f"{name} / {base} tokens/s", v, round(1 - noise, 3), verdict, rng))
    return out


def _half_range(rows: list[dict[str, object]]) -> float:
    vals = [float(r["tokens_per_s"]) for r in rows]  # type: ignore[arg-type]
    m = statistics.median(vals)
    return (max(vals) - min(vals)) / 2 / m if m else 0.0


def best_ceiling(summary: dict[str, dict[str, float]]) -> str | None:
    modes = [k for k in summary if k.startswith("ceiling:")]
    return max(modes, key=lambda k: summary[k]["tokens_per_s"]) if modes else None


def ratios(
    summary: dict[str, dict[str, float]], results: dict[str, list[dict[str, object]]], workers: int
) -> list[tuple[str, float, float, str, str]]:
    """(name, value, target, verdict, per-round range)."""
    out: list[tuple[str, float, float, str, str]] = []
    sk = summary.get("storekit")
    if not sk:
        return out

    def per_round(a: str, b: str, scale: float = 1.0) -> str:
        pairs = [
            float(x["tokens_per_s"]) / float(y["tokens_per_s"]) / scale
            for x, y in zip(results[a], results[b], strict=False)
        ]
        return f"{min(pairs):.2f}–{max(pairs):.2f}" if pairs else "-"

    for peer, target in (("datatrove", TARGETS["datatrove"]), ("megatron", TARGETS["megatron"])):
        if peer in summary:
            v = sk["tokens_per_s"] / summary[peer]["tokens_per_s"]
            out.append(
                (
                    f"storekit / {peer}",
                    v,
                    target,
                    "PASS" if v >= target else "FAIL",
                    per_round("storekit", peer),
                )
            )
    ceiling = best_ceiling(summary)
    if ceiling:
        v = sk["tokens_per_s"] / summary[ceiling]["tokens_per_s"]
        out.append(
            (
                f"storekit / ceiling ({ceiling.split(':', 1)[1]})",
                v,
                TARGETS["ceiling"],
                "PASS" if v >= TARGETS["ceiling"] else "FAIL",
                per_round("storekit", ceiling),
            )
        )
    if "storekit-w1" in summary:
        v = sk["tokens_per_s"] / (workers * summary["storekit-w1"]["tokens_per_s"])
        out.append(
            (
                f"parallel efficiency 1→{workers}",
                v,
                TARGETS["efficiency"],
                "PASS" if v >= TARGETS["efficiency"] else "FAIL",
                per_round("storekit", "storekit-w1", workers),
            )
        )
    if "storekit-w1" in summary and "storekit-threads" in summary:  # informational: no target
        v = summary["storekit-threads"]["tokens_per_s"] / (workers * summary["storekit-w1"]["tokens_per_s"])
        out.append(
            (
                f"… with the {workers} workers as threads of one process (informational)",
                v,
                0.0,
                "-",
                per_round("storekit-threads", "storekit-w1", workers),
            )
        )
    rss = sk["max_peak_tree_rss"]
    out.append(
        (
            "storekit peak tree RSS (GiB, max over rounds)",
            rss / GIB,
            1.0,
            "PASS" if rss < GIB else "FAIL",
            "-",
        )
    )
    return out


GIVEN = {
    "storekit": "prepare dataset --workers {n} --no-dedup --eos, taskset {n} cores; + dataset verify",
    "storekit-w1": "same, --workers 1, taskset 1 core",
    "storekit-dedup": "same as storekit with --dedup",
    "storekit-threads": "same as storekit, its {n} workers as threads of one process",
    "storekit-hf": "same as storekit with --tokenizer-engine hf (the `tokenizers` engine)",
    "datatrove": "JsonlReader→DocumentTokenizer (tasks={n}, workers={n}, batch 10000) → Merger, taskset {n}",
    "megatron": "preprocess_data.py --workers {n} --append-eod, HF tokenizer, taskset {n}",
}


def markdown(
    args: argparse.Namespace,
    env: dict[str, object],
    summary: dict[str, dict[str, float]],
    results: dict[str, list[dict[str, object]]],
    rat: list[tuple[str, float, float, str, str]],
    memory: list[dict[str, object]],
) -> str:
    n = args.workers
    lines = [
        f"### prepare dataset throughput — {env['date']} ({env['host']}, {env['nproc']} cores, {n} used)",
        "",
        f"Corpus: `{env['corpus']}` — {env['corpus_docs']:,} docs, "
        f"{env['corpus_bytes'] / 1e6:,.1f} MB jsonl (in {args.parts} part files for the glob readers); "
        f"tokenizer: anthropic 0.34.0 tokenizer.json (65k BPE), EOS `<EOT>` appended; "
        f"{env['dataset_tokens']:,} tokens incl. EOS. Rounds: {args.repeat} (order rotated) "
        f"after {args.warmup_rounds} untimed warm-up round(s), medians; "
        f"spread = ±half the min–max range. Load average at start: {env['loadavg']}. "
        f"storekit: {env['storekit']}, {env['storekit_bytecode']}.",
    ]
    trees = [f"`{k}` = {v}" for k, v in env.items() if k.startswith("storekit@")]
    if trees:
        lines[-1] += " Trees: " + "; ".join(trees) + "."
    if summary:
        lines += [
            "",
            "| tool | given | wall s | tokens/s | tokens/CPU-s | peak tree RSS | peak tree PSS "
            "| max process RSS | load |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
    for name, s in summary.items():
        given = (
            GIVEN.get(name, GIVEN.get(name.split("@")[0], ""))
            if not name.startswith("ceiling")
            else (
                f"{name.split(':', 1)[1]}, batch {args.ceiling_batch} docs, "
                f"RAYON_NUM_THREADS={1 if name.startswith('ceiling-w1') else n}"
            )
        )
        rows = results[name]
        lines.append(
            f"| {name} | {given.format(n=n)} | {s['wall_s']:.1f} ({spread(rows, 'wall_s')}) | "
            f"{s['tokens_per_s']:,.0f} | {s['tokens_per_cpu_s']:,.0f} | {mib(s['peak_tree_rss'])} | "
            f"{mib(s['peak_tree_pss'])} | {mib(s['peak_single_rss'])} | {s['load']:.1f} |"
        )
    if rat:
        lines += [
            "",
            "| ratio | value | target | per-round range | verdict |",
            "| --- | ---: | ---: | ---: | --- |",
        ]
        for name, v, target, verdict, rng in rat:
            cmp = "<" if "RSS" in name else "≥"
            if verdict == "-":  # informational
                lines.append(f"| {name} | {v:.2f} | – | {rng} | – |")
                continue
            lines.append(f"| {name} | {v:.2f} | {cmp} {target} | {rng} | **{verdict}** |")
    if memory:
        lines += [
            "",
            "Bounded memory (storekit, one run each):",
            "",
            "| corpus | docs in / written | tokens | tokens/s | peak tree RSS | peak tree PSS "
            "| max process RSS | < 1 GiB |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for r in memory:
            rss, pss, single = (float(r[k]) for k in ("peak_tree_rss", "peak_tree_pss", "peak_single_rss"))  # type: ignore[arg-type]
            files = r.get("files") or {}
            docs = f"{r['corpus_docs']:,} / {files.get('documents', 0):,}"  # type: ignore[union-attr]
            ok = rss < GIB and bool(r["all_docs_written"])
            lines.append(
                f"| {r['corpus']} | {docs} | {r['tokens']:,} | {float(r['tokens_per_s']):,.0f} | {mib(rss)} "  # type: ignore[arg-type]
                f"| {mib(pss)} | {mib(single)} | **{'PASS' if ok else 'FAIL'}** |"
            )
    lines += phase_table(results, n)
    checks = env.get("checks", [])
    if checks:
        lines += ["", "Cross-checks: " + "; ".join(str(c) for c in checks)]
    lines += ["", f"Command: `{env['command']}`", ""]
    return "\n".join(lines)


PHASES = (
    ("start-up and exit", "startup"),
    ("plan (tokenizer, sources, engine choice, leases)", "plan"),
    ("of which engine choice (compile + sample check)", "engine"),
    ("tasks", "tasks"),
    ("finalize", "finalize"),
    ("dataset verify (its own process)", "verify"),
)


def phases(row: dict[str, object]) -> dict[str, float] | None:
    """One storekit run's wall time by phase, from prepare's --json timings and the measured walls."""
    reported = row.get("storekit_json")
    t = reported.get("timings") if isinstance(reported, dict) else None
    if not isinstance(t, dict):
        return None
    prep, total = float(row["prepare_wall_s"]), float(t["seconds"])  # type: ignore[arg-type]
    tasks, fin = float(t["tokenize_seconds"]), float(t["finalize_seconds"])
    return {
        "startup": prep - total,
        "plan": total - tasks - fin,
        "engine": float(t.get("engine_choice_seconds", 0.0)),
        "tasks": tasks,
        "finalize": fin,
        "verify": float(row["verify_wall_s"]),  # type: ignore[arg-type]
    }


def phase_table(results: dict[str, list[dict[str, object]]], workers: int) -> list[str]:
    names = [k for k in ("storekit-w1", "storekit", "storekit-threads") if results.get(k)]
    split = {k: [p for r in results[k] if (p := phases(r))] for k in names}
    if not all(split.get(k) for k in names) or not names:
        return []
    label = {
        "storekit-w1": "--workers 1, 1 core",
        "storekit": f"--workers {workers}, {workers} cores",
        "storekit-threads": f"same, {workers} threads of one process",
    }
    lines = [
        "",
        "storekit's wall time by phase (median seconds over rounds):",
        "",
        "| phase | " + " | ".join(label[k] for k in names) + " |",
        "| --- | " + " | ".join("---:" for _ in names) + " |",
    ]
    for title, key in PHASES:
        vals = [statistics.median(p[key] for p in split[k]) for k in names]
        lines.append(f"| {title} | " + " | ".join(f"{v:.2f}" for v in vals) + " |")
    if "storekit-w1" in names and len(names) >= 2:
        one = statistics.median(p["tasks"] for p in split["storekit-w1"])
        lines.append("")
        for k in names[1:]:
            many = statistics.median(p["tasks"] for p in split[k])
            eff = one / (workers * many)
            lines.append(f"Tasks alone, 1→{workers} ({label[k]}): efficiency {eff:.2f} (informational).")
    return lines


# ---------------------------------------------------------------- main


def cross_checks(results: dict[str, list[dict[str, object]]]) -> list[str]:
    """Compare the token streams of the last round's outputs."""

    def files(name: str) -> dict[str, object] | None:
        rows = results.get(name) or []
        return rows[-1].get("files") if rows else None  # type: ignore[return-value]

    out: list[str] = []
    last = {name: rows[-1] for name, rows in results.items() if rows}
    if "storekit" in last and "storekit-hf" in last:
        fast, hf = last["storekit"], last["storekit-hf"]
        same = fast.get("shard_sha256") == hf.get("shard_sha256")
        out.append(
            f"storekit engine {fast.get('engine')} vs {hf.get('engine')}: shard files "
            f"{'byte-identical' if same else 'DIFFERENT'} (sha256 {str(fast.get('shard_sha256'))[:16]}...)"
        )
    sk, meg, dt = files("storekit"), files("megatron"), files("datatrove")
    if sk and meg:
        same = sk["stream_sha256"] == meg["stream_sha256"]
        out.append(
            f"storekit vs Megatron token stream: {'identical' if same else 'DIFFERENT'} "
            f"({sk['tokens']:,} vs {meg['tokens']:,} tokens, {sk['documents']:,} vs "
            f"{meg['documents']:,} docs, {sk['bin_bytes']:,} vs {meg['bin_bytes']:,} .bin bytes, "
            f"dtype {sk['dtype']} vs {meg['dtype']})"
        )
    ref = meg or sk
    if dt and ref:
        same = dt["multiset_sha256"] == ref["multiset_sha256"]
        out.append(
            f"datatrove vs {'Megatron' if meg else 'storekit'} documents (as a multiset, datatrove "
            f"shuffles): {'identical' if same else 'DIFFERENT'} ({dt['tokens']:,} tokens, "
            f"{dt['documents']:,} docs)"
        )
    for name in ("storekit", "megatron", "datatrove"):
        f = files(name)
        if f and f["eos_at_doc_ends"] != f["documents"]:
            out.append(f"{name}: only {f['eos_at_doc_ends']}/{f['documents']} documents end with EOS")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, help="jsonl corpus (default: make_corpus.py output for --size-mb)")
    ap.add_argument("--size-mb", type=float, default=120)
    ap.add_argument(
        "--limit-mb", type=float, default=0, help="use only the first MB of the corpus (harness checks)"
    )
    ap.add_argument(
        "--parts", type=int, default=8, help="part files for the glob readers (storekit, datatrove)"
    )
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--warmup-rounds",
        type=int,
        default=1,
        help="untimed rounds first (default 1): inputs, libraries and storekit's tokenizer cache in "
        "memory for every contender alike (this VM's DAMON pages out what stays idle for 60 s)",
    )
    ap.add_argument("--tools", default=",".join(ALL_TOOLS), help=f"subset of {','.join(ALL_TOOLS)}")
    ap.add_argument("--storekit-cmd", default=f"{sys.executable} -m storekit")
    ap.add_argument(
        "--storekit-pythonpath", default=str(HERE.parent), help="PYTHONPATH for storekit ('' = none)"
    )
    ap.add_argument(
        "--storekit-tree",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="run storekit from this checkout (PYTHONPATH) as the contender storekit@LABEL instead of "
        "'storekit'; repeat to compare trees in one run (ratios against the first)",
    )
    ap.add_argument("--dedup-row", action="store_true", help="also run storekit with --dedup (one row more)")
    ap.add_argument(
        "--ceiling-python", default="/tmp/venv/bin/python", help="python with the storekit tokenizers"
    )
    ap.add_argument("--ceiling-batch", type=int, default=1000, help="documents per encode_batch call")
    ap.add_argument("--ceiling-modes", default=",".join(CEILING_MODES))
    ap.add_argument("--datatrove-args", default="", help="extra args for peers/datatrove_tokenize.py")
    ap.add_argument("--megatron-tree", help="Megatron-LM tree (default benchmarks/.work/megatron-*)")
    ap.add_argument("--memory-check", action="store_true", help="storekit on giant docs and on a 3x corpus")
    ap.add_argument(
        "--giant-mb", type=int, default=48, help="size of each giant document (storekit drops > 64 MiB lines)"
    )
    ap.add_argument("--sample-interval", type=float, default=0.1, help="seconds between /proc memory samples")
    ap.add_argument("--out-root", type=Path, default=WORK / "out")
    ap.add_argument("--json-out", type=Path, help="all raw results (default .work/results/<time>.json)")
    args = ap.parse_args()
    tools = [t for t in args.tools.split(",") if t]
    unknown = set(tools) - set(ALL_TOOLS)
    if unknown:
        raise SystemExit(f"bench: unknown tools {sorted(unknown)}")

    trees = dict(tree_option(t) for t in args.storekit_tree)
    lock = hold_lock()
    become_subreaper()
    corpus, parts, cstats = ensure_corpus(args)
    s = make_setup(args, corpus, parts)
    args.out_root.mkdir(parents=True, exist_ok=True)
    env: dict[str, object] = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "host": platform.node(),
        "nproc": os.cpu_count(),
        "cpu": next(
            (
                ln.split(":", 1)[1].strip()
                for ln in read("/proc/cpuinfo").splitlines()
                if ln.startswith("model")
            ),
            "?",
        ),
        "loadavg": " ".join(read("/proc/loadavg").split()[:3]),
        "corpus": str(corpus.relative_to(HERE.parent)) if corpus.is_relative_to(HERE.parent) else str(corpus),
        "corpus_bytes": corpus.stat().st_size,
        "corpus_docs": count_lines(corpus),
        "corpus_stats": cstats,
        "lock": lock,
        "command": "python3 benchmarks/bench_prepare.py " + shlex.join(sys.argv[1:]),
        "tools": tools,
        "storekit": storekit_version(args),
        "storekit_bytecode": compile_bytecode(s, [args.storekit_pythonpath, *trees.values()]),
    }
    for label, where in trees.items():
        env[f"storekit@{label}"] = storekit_version(args, where)
    log(f"lock {lock}; corpus {corpus} ({env['corpus_docs']} docs); workers {args.workers}; tools {tools}")

    ceiling_modes = args.ceiling_modes.split(",")
    results: dict[str, list[dict[str, object]]] = {}
    order = [t for t in ALL_TOOLS if t in tools]
    if args.dedup_row and "storekit" in tools:
        order.append("storekit-dedup")
    if trees and "storekit" in order:
        at = order.index("storekit")
        order[at : at + 1] = [f"storekit@{label}" for label in trees]
    dataset_tokens: int | None = None
    n = args.workers
    for rnd in range(-args.warmup_rounds, args.repeat if order else 0):
        rotated = order[rnd % len(order) :] + order[: rnd % len(order)]
        for tool in rotated:
            t0 = time.time()
            la = read("/proc/loadavg").split()[0]
            if tool == "storekit":
                rows = {"storekit": run_storekit(s, n, f"w{n}")}
            elif tool.startswith("storekit@"):
                tree = dataclasses.replace(
                    s, storekit_env={**s.storekit_env, "PYTHONPATH": trees[tool.split("@", 1)[1]]}
                )
                rows = {tool: run_storekit(tree, n, f"w{n}-{tool.split('@', 1)[1]}")}
            elif tool == "storekit-w1":
                rows = {"storekit-w1": run_storekit(s, 1, "w1")}
            elif tool == "storekit-threads":
                rows = {"storekit-threads": run_storekit(s, n, f"w{n}-threads", threads_per_process=n)}
            elif tool == "storekit-hf":
                rows = {"storekit-hf": run_storekit(s, n, f"w{n}-hf", engine="hf")}
            elif tool == "storekit-dedup":
                rows = {"storekit-dedup": run_storekit(s, n, f"w{n}-dedup", dedup=True)}
            elif tool == "datatrove":
                rows = {"datatrove": run_datatrove(s, n, f"w{n}")}
            elif tool == "megatron":
                rows = {"megatron": run_megatron(s, n, f"w{n}")}
            elif tool == "ceiling":
                rows = {
                    f"ceiling:{k}": v for k, v in run_ceiling(s, n, ceiling_modes, dataset_tokens).items()
                }
            else:  # ceiling-w1: the fastest mode that yields ids, on one thread
                rows = {
                    f"ceiling-w1:{k}": v
                    for k, v in run_ceiling(s, 1, ["encode_batch_fast+ids"], dataset_tokens).items()
                }
            if rnd < 0:
                log(f"warm-up {tool}: {time.time() - t0:.1f}s (not counted)")
                continue
            for name, row in rows.items():
                row["round"] = rnd
                row["loadavg_before"] = la
                results.setdefault(name, []).append(row)
                if dataset_tokens is None and name.split("@")[0] in ("megatron", "storekit", "datatrove"):
                    dataset_tokens = int(row["tokens"])  # type: ignore[arg-type]
                log(
                    f"round {rnd + 1}/{args.repeat} {name}: {float(row['wall_s']):.1f}s "  # type: ignore[arg-type]
                    f"{float(row['tokens_per_s']):,.0f} tok/s "  # type: ignore[arg-type]
                    f"{float(row['tokens_per_cpu_s']):,.0f} tok/CPU-s "  # type: ignore[arg-type]
                    f"tree RSS {mib(float(row['peak_tree_rss']))} "  # type: ignore[arg-type]
                    f"(load {la}, {time.time() - t0:.0f}s)"
                )

    memory: list[dict[str, object]] = []
    if args.memory_check:
        memory = memory_check(args, s)

    summary = summarise(results)
    counts = {name: int(r["tokens"]) for name, rows in results.items() for r in rows[-1:]}  # type: ignore[arg-type]
    env["dataset_tokens"] = dataset_tokens or next(iter(counts.values()), 0)
    env["checks"] = cross_checks(results) + [
        f"{k}: {v:,} tokens" for k, v in counts.items() if dataset_tokens and v != dataset_tokens
    ]
    rat = ratios(summary, results, n) + tree_ratios(summary, results, list(trees))
    md = markdown(args, env, summary, results, rat, memory)
    json_out = args.json_out or WORK / "results" / f"prepare-{time.strftime('%Y%m%d-%H%M%S')}.json"
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(
        json.dumps(
            {"env": env, "summary": summary, "results": results, "ratios": rat, "memory": memory},
            indent=2,
            default=str,
        )
    )
    print()
    for name, v, target, verdict, rng in rat:
        cmp = "<" if "RSS" in name else ">="
        print(f"{verdict:4s}  {name}: {v:.3f} (target {cmp} {target}; per round {rng})")
    print()
    print(md)
    log(f"raw results: {json_out}")


def memory_check(args: argparse.Namespace, s: Setup) -> list[dict[str, object]]:
    """storekit once on giant documents and once on a 3x corpus: peak memory must not grow with size."""
    rows: list[dict[str, object]] = []
    size = args.size_mb
    giant = WORK / "corpus" / f"corpus-{size:g}mb-giant3x{args.giant_mb}.jsonl"
    corpora = [
        (
            f"{size:g} MB + 3 giant docs of {args.giant_mb} MiB",
            ["--size-mb", f"{size:g}", "--giant", "3", "--giant-mb", str(args.giant_mb)],
            giant,
        ),
        (
            f"{size * 3:g} MB (3x)",
            ["--size-mb", f"{size * 3:g}"],
            WORK / "corpus" / f"corpus-{size * 3:g}mb.jsonl",
        ),
    ]
    for label, mk_args, path in corpora:
        if not path.exists():
            log(f"building {path}")
            subprocess.run(
                [sys.executable, str(HERE / "make_corpus.py"), *mk_args, "--out", str(path)],
                check=True,
                stdout=subprocess.DEVNULL,
            )
        part_dir = split_parts(path, args.parts)
        row = run_storekit(s, args.workers, "memcheck", corpus_glob=str(part_dir / "*.jsonl"))
        row["corpus"] = label
        row["corpus_docs"] = count_lines(path)
        files = row.get("files") or {}
        row["all_docs_written"] = files.get("documents") == row["corpus_docs"]  # type: ignore[union-attr]
        rows.append(row)
        log(
            f"memory check {label}: tree RSS {mib(float(row['peak_tree_rss']))}, "  # type: ignore[arg-type]
            f"max process {mib(float(row['peak_single_rss']))}, {float(row['tokens_per_s']):,.0f} tok/s"
        )  # type: ignore[arg-type]
    return rows


if __name__ == "__main__":
    main()
