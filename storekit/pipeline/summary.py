"""Summaries of a plan and of a dataset manifest: the data `--json` prints (storekit.cli draws it)."""

from __future__ import annotations

from typing import Any

from storekit.manifest import Manifest
from storekit.pipeline.plan import PrepPlan


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
