"""The answer in training terms: how long a checkpoint of the model takes, how many GPUs the data feeds.

checkpoint save time = model checkpoint bytes / measured checkpoint write bandwidth (fsync included,
all ranks at once, so the slowest rank sets it); load time likewise from the read-back.
GPUs fed = dataset bandwidth / (tokens per second per GPU x bytes per token), from the random
training-window reads when measured (the data loader's pattern), else from streaming shard reads.
Both are compared with thresholds the user sets (--target-checkpoint-s, --gpus, --gpu-tokens-per-s).
"""

from __future__ import annotations

from typing import Any

from storekit.bench.spec import BenchSpec


def best(points: list[dict[str, Any]], pattern: str, phase: str) -> tuple[float, str] | None:
    """The highest median bandwidth of `phase` over the points of `pattern`, and where it was measured."""
    found: tuple[float, str] | None = None
    for point in points:
        if point["pattern"] != pattern:
            continue
        for ph in point["phases"]:
            median = ph["summary"]["bandwidth_bytes_per_s"]["median"]
            if ph["phase"] == phase and median and (found is None or median > found[0]):
                found = (float(median), point["label"])
    return found


def judge(spec: BenchSpec, points: list[dict[str, Any]]) -> dict[str, Any]:
    model = spec.model
    out: dict[str, Any] = {
        "model": model.to_dict(),
        "thresholds": {
            "target_checkpoint_s": spec.target_checkpoint_s,
            "gpus": spec.gpus,
            "gpu_tokens_per_s": spec.gpu_tokens_per_s,
            "token_bytes": spec.token_bytes,
        },
        "checkpoint": None,
        "data": [],
    }
    write, read = best(points, "checkpoint", "write"), best(points, "checkpoint", "read")
    if write:
        save_s = model.checkpoint_bytes / write[0]
        out["checkpoint"] = {
            "bytes": model.checkpoint_bytes,
            "ranks": spec.ranks,
            "write_bandwidth_bytes_per_s": write[0],
            "measured_at": write[1],
            "save_s": save_s,
            "load_s": model.checkpoint_bytes / read[0] if read else None,
            "scaled_from_sample": not spec.full_checkpoint,
            "pass": save_s <= spec.target_checkpoint_s,
        }
    per_gpu = spec.gpu_tokens_per_s * spec.token_bytes
    for pattern, phase, source in (
        ("tokens", "randread", "random training windows"),
        ("shards", "read", "streaming shards"),
    ):
        measured = best(points, pattern, phase)
        if measured:
            gpus_fed = measured[0] / per_gpu
            out["data"].append(
                {
                    "source": source,
                    "pattern": pattern,
                    "bandwidth_bytes_per_s": measured[0],
                    "measured_at": measured[1],
                    "tokens_per_s": measured[0] / spec.token_bytes,
                    "gpus_fed": gpus_fed,
                    "pass": gpus_fed >= spec.gpus,
                }
            )
    decisive = [out["checkpoint"]] if out["checkpoint"] else []
    decisive += out["data"][:1]  # the loader's pattern when measured, else streaming
    out["pass"] = all(d["pass"] for d in decisive) if decisive else None
    return out


def verdict_lines(verdict: dict[str, Any]) -> list[str]:
    lines = []
    thresholds = verdict["thresholds"]
    ckpt = verdict.get("checkpoint")
    model = verdict["model"]
    if ckpt:
        scaled = " (scaled from the sample written)" if ckpt["scaled_from_sample"] else ""
        load = f", load {ckpt['load_s']:.1f} s" if ckpt["load_s"] else ""
        lines.append(
            f"checkpoint {model['name']} ({ckpt['bytes'] / 1e9:.1f} GB over {ckpt['ranks']} ranks): "
            f"save {ckpt['save_s']:.1f} s{load}{scaled} -> "
            f"{'PASS' if ckpt['pass'] else 'FAIL'} (target {thresholds['target_checkpoint_s']:g} s)"
        )
    for d in verdict["data"]:
        lines.append(
            f"data ({d['source']}): {d['bandwidth_bytes_per_s'] / 1e9:.2f} GB/s = "
            f"{d['tokens_per_s']:.3g} tokens/s feeds {d['gpus_fed']:.0f} GPUs at "
            f"{thresholds['gpu_tokens_per_s']:.0f} tokens/s/GPU -> "
            f"{'PASS' if d['pass'] else 'FAIL'} (need {thresholds['gpus']})"
        )
    return lines
