"""datatrove peer for bench_prepare.py: raw jsonl -> one set of final tokenized files.

Runs (in datatrove's own venv) the pipeline a datatrove user writes for this job, with datatrove's
defaults unless told otherwise:
  1. LocalPipelineExecutor(tasks=N, workers=N): JsonlReader(folder, glob) -> DocumentTokenizer
     (tokenizer.json, eos_token appended; default batch_size=10000 docs, default per-file document
     shuffle), one .ds/.ds.index per task;
  2. LocalPipelineExecutor(tasks=1): DocumentTokenizerMerger -> one merged .ds (+ .index, .metadata)
     (default shuffle of documents across the inputs).
Prints one JSON line with the step timings.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input-dir", required=True)
    ap.add_argument("--glob", default="*.jsonl")
    ap.add_argument("--tokenizer", required=True, help="path to tokenizer.json")
    ap.add_argument("--eos", default="<EOT>")
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--tasks", type=int, default=0, help="default: = workers")
    ap.add_argument("--work", required=True, help="scratch folder (per-task files, logs)")
    ap.add_argument("--output", required=True, help="final merged folder")
    ap.add_argument(
        "--batch-size", type=int, default=0, help="DocumentTokenizer batch_size (0: datatrove default)"
    )
    ap.add_argument("--no-shuffle", action="store_true", help="turn datatrove's default shuffles off")
    args = ap.parse_args()

    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.tokens import DocumentTokenizer, DocumentTokenizerMerger

    tok_kwargs: dict[str, object] = {}
    if args.batch_size:
        tok_kwargs["batch_size"] = args.batch_size
    if args.no_shuffle:
        tok_kwargs["shuffle_documents"] = False
    tasks = args.tasks or args.workers
    t0 = time.perf_counter()
    LocalPipelineExecutor(
        pipeline=[
            JsonlReader(args.input_dir, glob_pattern=args.glob, text_key="text", id_key="id"),
            DocumentTokenizer(
                output_folder=f"{args.work}/tokenized",
                tokenizer_name_or_path=args.tokenizer,
                eos_token=args.eos,
                **tok_kwargs,  # type: ignore[arg-type]
            ),
        ],
        tasks=tasks,
        workers=args.workers,
        logging_dir=f"{args.work}/logs-tokenize",
    ).run()
    t1 = time.perf_counter()
    LocalPipelineExecutor(
        pipeline=[
            DocumentTokenizerMerger(
                input_folder=f"{args.work}/tokenized",
                output_folder=args.output,
                save_filename="merged",
                shuffle=not args.no_shuffle,
                progress=False,
            )
        ],
        tasks=1,
        workers=1,
        logging_dir=f"{args.work}/logs-merge",
    ).run()
    t2 = time.perf_counter()
    print(json.dumps({"tokenize_s": t1 - t0, "merge_s": t2 - t1, "tasks": tasks, "workers": args.workers}))


if __name__ == "__main__":
    main()
