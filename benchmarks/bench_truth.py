#!/usr/bin/env python3
"""Cross-check: storekit's shards against `tokenizers` on the whole document (issue 35).

Not engine against engine: for each tokenizer family (byte-level BPE, Llama-3 Split, o200k Split with
ignore_merges, tekken, Metaspace with byte fallback, added tokens with every flag) it runs
`storekit prepare dataset` (engines auto and hf) on one corpus with giant documents (above the 4 MiB
threshold, the real piece size: nothing lowered) and compares every document of the shards with
`Tokenizer.encode(text, add_special_tokens=False).ids + [EOS]` of the whole text. A document storekit
refused (counted in the manifest errors) is listed, never compared; any differing document is a bug.

The tokenizers are the test suite's (tests/unit/pipeline/tokfiles.py: small BPEs trained by
`tokenizers` itself, the bundled 65k, tekken from mistral-common when installed). CJK text, where
neither cut rule finds a place, is in it twice: a long document below the giant threshold and a giant
one of half as many characters as the others have bytes; both are encoded whole (within the 4 Mi
character bound), not refused.

    python benchmarks/bench_truth.py                      # 2 MB of real text + 4 giant documents of 5 MiB
    python benchmarks/bench_truth.py --giant-mb 20 --families llama3,metaspace

Everything it writes is under benchmarks/.work/truth/ (results.json holds the table).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.unit.pipeline import tokfiles  # noqa: E402
from tests.unit.pipeline.helpers import SAMPLE_CORPUS, dataset_documents  # noqa: E402

WORK = REPO / "benchmarks" / ".work" / "truth"
WORDS = ["word", "x", "'s", "42", "ünï", "\u00a0", "  ", "\t", "\n", "\r\n", ".\n", ",\r\n", "/\n",
         "<|endoftext|>", "<|sep|>", "e\u0301", "ﬁ", "Ω", "Ω", "😀", "Привет", "中文", "\x1c"]  # fmt: skip
CJK = ["中文", "文本", "处理", "，", "。", "。\n", "\n", "　　", "第一章", "テキスト", "한국어", "！", "１２"]


def corpus(path: Path, sample_mb: float, giant_mb: float) -> dict[str, Any]:
    texts: list[str] = []
    with gzip.open(SAMPLE_CORPUS, "rt", encoding="utf-8") as fh:
        total = 0
        for line in fh:
            text = json.loads(line)["text"]
            if text.strip():
                texts.append(text)
                total += len(text)
            if total >= sample_mb * 1e6:
                break
    prose = "".join(texts)
    n = int(giant_mb * (1 << 20))
    rng = random.Random(35)
    noise = "".join(rng.choice(WORDS) + rng.choice(["", " ", "\n", "  "]) for _ in range(20_000))
    cjk = "".join(rng.choice(CJK) for _ in range(n // 3))  # no place to cut: whole up to 4 Mi chars
    giants = [
        ("x.\n" * (n // 3 + 1))[:n],  # Llama-3 Split: `.\n` is one pre-token
        (prose * (n // max(1, len(prose)) + 1))[:n],
        ("<|sep|>   " * (n // 10 + 1))[:n],  # an rstrip added token
        (cjk * 2)[: n // 2],
    ]
    docs = [*texts[: len(texts) // 2], giants[0], noise, "\x1c\x1d\x1e\x1f", cjk[:300_000]]
    docs += texts[len(texts) // 2 :]
    docs += giants[1:]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for t in docs:
            out.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    return {"documents": len(docs), "giant_documents": len(giants), "bytes": path.stat().st_size}


def prepare(tok: Path, eos: str, engine: str, out: Path, data: Path) -> tuple[dict[str, Any], float]:
    cmd = [sys.executable, "-m", "storekit", "prepare", "dataset", "-i", str(data), "--tokenizer", str(tok),
           "--eos-token", eos, "--name", "truth", "--output", str(out), "--no-dedup",
           "--tokenizer-engine", engine, "--json", "--quiet"]  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)  # this script's own output of an earlier run
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    seconds = time.monotonic() - t0
    if res.returncode != 0:
        raise SystemExit(f"prepare failed (exit {res.returncode}): {res.stderr.strip()}")
    return json.loads(res.stdout), seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample-mb", type=float, default=2.0, help="real text from the bundled sample")
    ap.add_argument("--giant-mb", type=float, default=5.0, help="size of each of the 3 giant documents")
    ap.add_argument("--families", default="bytelevel,llama3,o200k,tekken,metaspace,prepend,added")
    ap.add_argument("--engines", default="auto,hf")
    args = ap.parse_args()
    from tokenizers import Tokenizer

    data = WORK / "corpus.jsonl"
    info = corpus(data, args.sample_mb, args.giant_mb)
    texts = [json.loads(line)["text"] for line in data.read_text(encoding="utf-8").splitlines()]
    print(f"corpus: {info['documents']} documents ({info['giant_documents']} giant of "
          f"{args.giant_mb} MiB), {info['bytes']} bytes")  # fmt: skip
    rows = []
    print(f"{'tokenizer':<10} {'engine':<8} {'chosen':<9} {'cut rule':<8} {'kept':>5} {'refused':>7} "
          f"{'tokens':>10} {'differ':>6}  first difference / refused  seconds")  # fmt: skip
    for family in args.families.split(","):
        tok_file = tokfiles.write(tokfiles.family_doc(family), WORK / f"{family}.json")
        tok = Tokenizer.from_str(tok_file.read_text(encoding="utf-8"))
        eos_name = tokfiles.family_eos(family)
        eos = tok.token_to_id(eos_name)
        truth: list[list[int]] | None = None
        for engine in args.engines.split(","):
            out = WORK / f"out-{family}-{engine}"
            result, seconds = prepare(tok_file, eos_name, engine, out, data)
            manifest = result["manifest"]
            refused = [e["where"] for e in manifest["stats"]["error_examples"]]
            refused_lines = {int(w.rsplit(":", 1)[1]) - 1 for w in refused}
            if truth is None:
                truth = [[*tok.encode(t, add_special_tokens=False).ids, eos] for t in texts]
            expected = [ids for k, ids in enumerate(truth) if k not in refused_lines]
            got = dataset_documents(out)
            differ = [k for k, (g, e) in enumerate(zip(got, expected, strict=False)) if g != e]
            differ += list(range(min(len(got), len(expected)), max(len(got), len(expected))))
            first = ""
            if differ:
                k = differ[0]
                g, e = got[k] if k < len(got) else [], expected[k] if k < len(expected) else []
                at = next(
                    (i for i, (a, b) in enumerate(zip(g, e, strict=False)) if a != b), min(len(g), len(e))
                )
                first = f"doc {k}: token {at} ({len(g)} vs {len(e)} tokens)"
            row = {
                "tokenizer": family,
                "engine": engine,
                "chosen": manifest["tokenizer"]["engine"]["name"],
                "cut_rule": manifest["tokenizer"].get("cut_rule"),
                "documents_kept": len(got),
                "refused": refused,
                "tokens": sum(map(len, got)),
                "differing_documents": len(differ),
                "first_difference": first,
                "seconds": round(seconds, 1),
            }
            rows.append(row)
            note = first or ("; ".join(refused) if refused else "-")
            print(f"{family:<10} {engine:<8} {row['chosen']:<9} {row['cut_rule'] or 'none':<8} "
                  f"{len(got):>5} {len(refused):>7} {row['tokens']:>10} {len(differ):>6}  {note[:60]}  "
                  f"{seconds:.1f}")  # fmt: skip
    (WORK / "results.json").write_text(json.dumps({"corpus": info, "rows": rows}, indent=1))
    bad = sum(r["differing_documents"] for r in rows)
    print(f"differing documents in all: {bad}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
