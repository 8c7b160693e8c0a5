"""Summaries of a plan and of a dataset manifest, for `--json` and for people."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from storekit.manifest import Manifest
from storekit.pipeline.plan import PrepPlan
from storekit.units import format_bytes as format_size

SAMPLE_CORPUS = "bundled:cpython-stdlib-sample"


def plan_summary(plan: PrepPlan, *, work_dir: str) -> dict[str, Any]:
    itemsize = 2 if plan.tokenizer.dtype == "uint16" else 4
    est_tokens = plan.total_bytes // 4  # typical BPE: ~4 bytes of text per token
    shard_tokens = plan.options["shard_tokens"] or max(1, plan.options["shard_bytes"] // itemsize)
    return {
        "plan_id": plan.plan_id,
        "dataset": plan.dataset,
        "output": plan.output,
        "sources": len(plan.sources),
        "input_bytes": plan.total_bytes,
        "tasks": len(plan.tasks),
        "task_bytes": plan.task_bytes,
        "estimated_tokens": est_tokens,
        "estimated_shards": max(1, -(-est_tokens // shard_tokens)),
        "estimated_output_bytes_max": plan.max_output_bytes,
        "tokenizer": plan.tokenizer.name,
        "tokenizer_vocab_size": plan.tokenizer.vocab_size,
        "tokenizer_engine": {
            "name": plan.tokenizer.engine,
            "reason": plan.tokenizer.engine_reason,
            "sample_check": plan.tokenizer.sample_check,
        },
        "dtype": plan.tokenizer.dtype,
        "options": plan.options,
        "work_dir": work_dir,
        "source_files": [
            {
                "path": s.display,
                "format": s.format,
                "compression": s.compression,
                "size": s.size,
                "data_size": s.data_size,
            }
            for s in plan.sources
        ],
    }


def manifest_summary(manifest: Manifest) -> dict[str, Any]:
    body = manifest.body
    return {
        "dataset": body.get("dataset"),
        "plan_id": body.get("plan_id"),
        "created_at": body.get("created_at"),
        "storekit_version": manifest.storekit_version,
        "format": body.get("format"),
        "tokenizer": body.get("tokenizer"),
        "splits": body.get("splits"),
        "shards": len(body.get("shards", [])),
        "files": len(manifest.files),
        "bytes": manifest.total_bytes,
        "sources": len(body.get("sources", [])),
        "options": body.get("options"),
        "stats": body.get("stats"),
    }


def render_manifest_summary(console: Console, summary: dict[str, Any]) -> None:
    ds = summary.get("dataset") or {}
    tok = summary.get("tokenizer") or {}
    stats = summary.get("stats") or {}
    table = Table("", "", show_header=False, box=None)
    table.add_row("dataset", f"{ds.get('kind')}/{ds.get('name')}/{ds.get('version')}")
    table.add_row("created", f"{summary.get('created_at')} by storekit {summary.get('storekit_version')}")
    table.add_row(
        "tokenizer",
        f"{tok.get('name')} (vocab {tok.get('vocab_size')}, {tok.get('dtype')}, "
        f"xxh3-128 {str(tok.get('xxh3_128'))[:16]}...)",
    )
    engine = tok.get("engine") or {}
    if engine:
        table.add_row("engine", f"{engine.get('name')}: {engine.get('reason')}")
    for split, s in (summary.get("splits") or {}).items():
        table.add_row(
            split, f"{s['documents']:,} documents, {s['tokens']:,} tokens in {s['shards']} shard(s)"
        )
    table.add_row(
        "size",
        f"{format_size(summary.get('bytes', 0))} in {summary.get('files')} files "
        f"from {summary.get('sources')} source file(s)",
    )
    if stats:
        table.add_row(
            "documents",
            f"read {stats.get('docs_read', 0):,}  kept {stats.get('docs_kept', 0):,}  "
            f"duplicate {stats.get('docs_duplicate', 0):,}  filtered {stats.get('docs_filtered', 0):,}  "
            f"bad {stats.get('docs_malformed', 0):,}",
        )
        if stats.get("special_token_strings"):
            opts = summary.get("options") or {}
            became = "plain text" if opts.get("special_tokens") == "text" else "special tokens"
            table.add_row(
                "special text",
                f"{stats['special_token_strings']:,} literal special-token strings, encoded as {became}",
            )
        if stats.get("errors"):
            table.add_row("bad records", ", ".join(f"{k} {v:,}" for k, v in stats["errors"].items()))
            table.add_row("", _bad_records_note(stats))
        for example in stats.get("error_examples", [])[:3]:
            table.add_row("", f"{example['where']}: {example['reason']}: {example['detail']}")
    console.print(table)


def _bad_records_note(stats: dict[str, Any]) -> str:
    examples = stats.get("error_examples", [])
    if set(stats["errors"]) == {"empty"} and all(e["where"].startswith(SAMPLE_CORPUS) for e in examples):
        return (
            "the sample's empty files (__init__.py), kept in it on purpose: bad input is skipped "
            "and counted, not fatal"
        )
    return "skipped and counted, not fatal (--on-error fail stops at the first instead)"
