"""The ceiling for bench_prepare.py: the tokenizers library's own batch encoding of texts held in memory.

All texts of the corpus are loaded first (not timed). Then, for each mode, every text is encoded
once in batches of --batch docs with add_special_tokens=False, on as many Rayon threads as the
harness allows (RAYON_NUM_THREADS + taskset):
  encode_batch          Tokenizer.encode_batch            (full Encoding: offsets, tokens, masks)
  encode_batch+ids      ... and [e.ids for e in encodings] (the Python lists a writer needs)
  encode_batch_fast     Tokenizer.encode_batch_fast       (no offsets)
  encode_batch_fast+ids ... and [e.ids for e in encodings]
Each mode's wall time covers the whole loop (encode, optional ids extraction, freeing the batch);
its CPU time is getrusage(RUSAGE_SELF) user+sys over the loop (all threads). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

MODES = ["encode_batch", "encode_batch+ids", "encode_batch_fast", "encode_batch_fast+ids"]


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True, help="jsonl with a text field")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--batch", type=int, default=1000, help="documents per encode_batch call")
    ap.add_argument("--modes", default=",".join(MODES))
    args = ap.parse_args()

    import tokenizers

    try:
        import orjson

        loads = orjson.loads
    except ImportError:
        loads = json.loads
    t0 = time.perf_counter()
    with open(args.input, "rb") as f:
        texts = [loads(line)["text"] for line in f]
    load_s = time.perf_counter() - t0
    tok = tokenizers.Tokenizer.from_file(args.tokenizer)
    tok.encode_batch(texts[:64], add_special_tokens=False)  # warm the thread pool (untimed)
    batches = [texts[i : i + args.batch] for i in range(0, len(texts), args.batch)]

    results: dict[str, dict[str, float | int]] = {}
    for mode in args.modes.split(","):
        fast = mode.startswith("encode_batch_fast")
        want_ids = mode.endswith("+ids")
        encode = tok.encode_batch_fast if fast else tok.encode_batch
        n_tokens = 0
        c0, w0 = cpu(), time.perf_counter()
        for batch in batches:
            encodings = encode(batch, add_special_tokens=False)
            if want_ids:
                ids = [e.ids for e in encodings]
                n_tokens += sum(map(len, ids))
            else:
                n_tokens += sum(map(len, encodings))
            del encodings
        wall = time.perf_counter() - w0
        results[mode] = {"wall_s": wall, "cpu_s": cpu() - c0, "content_tokens": n_tokens}
    print(
        json.dumps(
            {
                "docs": len(texts),
                "text_chars": sum(map(len, texts)),
                "load_s": load_s,
                "batch": args.batch,
                "rayon_threads": os.environ.get("RAYON_NUM_THREADS", ""),
                "tokenizers": tokenizers.__version__,
                "modes": results,
            }
        )
    )


if __name__ == "__main__":
    main()
