"""`dataset blend`: a mixture of prepared datasets as the arguments Megatron-LM and NeMo take.

Each dataset's share is its token count (`--by tokens`) or the weight given with it (`PATH=0.3`);
inside a dataset the share is spread over its shards by their tokens, so a dataset is sampled as one
whatever its shard count. storekit's held-out split is the validation data; there is no test split.

Formats, each read by the trainer as it is:
  args        `--data-path W P ...`, or `--train-data-path ... --valid-data-path ...` with a holdout
  data-args   the `W P ...` list for Megatron-LM's `--data-args-path FILE` (no holdout)
  per-split   JSON {"train", "valid", "test"} for Megatron-LM's `--per-split-data-args-path FILE`
  nemo        JSON {"train", "validation", "test"} for NeMo's `model.data.data_prefix`
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from storekit.errors import UsageError
from storekit.manifest import Manifest
from storekit.pipeline.megatron import VALID_SPLITS, Prefix, as_command_line, shard_prefixes

FORMATS = ("args", "data-args", "per-split", "nemo")


@dataclass(frozen=True)
class BlendInput:
    path: str  # the prefix root Megatron will open (a local path, or the dataset's URL)
    manifest: Manifest
    weight: float | None  # None: by tokens


def parse_weighted(ref: str) -> tuple[str, float | None]:
    """`PATH=WEIGHT` or `PATH`; a weight must be a positive number."""
    path, sep, raw = ref.rpartition("=")
    if not sep:
        return ref, None
    try:
        weight = float(raw)
    except ValueError:
        raise UsageError(f"{ref}: the weight after '=' must be a number, e.g. {path}=0.3") from None
    if not weight > 0:
        raise UsageError(f"{ref}: weights must be positive")
    return path, weight


def blend_prefixes(inputs: Sequence[BlendInput]) -> list[Prefix]:
    given = [i.weight is not None for i in inputs]
    if any(given) and not all(given):
        raise UsageError("give a weight to every dataset (PATH=WEIGHT) or to none (weights by tokens)")
    out: list[Prefix] = []
    for item in inputs:
        shards = shard_prefixes(item.manifest.body, item.path)
        if not shards:
            raise UsageError(f"{item.path}: the dataset has no tokens to blend")
        if item.weight is None:
            out += shards  # by tokens: every shard weighs its tokens
            continue
        for split in {p.split for p in shards}:
            part = [p for p in shards if p.split == split]
            tokens = sum(p.tokens for p in part)
            out += [Prefix(p.split, p.path, p.tokens, item.weight * p.tokens / tokens) for p in part]
    return out


def _pairs(prefixes: Sequence[Prefix]) -> list[str] | None:
    total = sum(p.weight for p in prefixes)
    if not prefixes or total <= 0:
        return None
    out: list[str] = []
    for p in prefixes:
        out += [f"{p.weight / total:.8g}", p.path]
    return out


def split_lists(prefixes: Sequence[Prefix]) -> dict[str, list[str] | None]:
    return {
        "train": _pairs([p for p in prefixes if p.split not in VALID_SPLITS]),
        "valid": _pairs([p for p in prefixes if p.split in VALID_SPLITS]),
        "test": None,
    }


def render(prefixes: Sequence[Prefix], fmt: str) -> str:
    lists = split_lists(prefixes)
    if lists["train"] is None:
        raise UsageError("the blend has no training data")
    if fmt == "args":
        if lists["valid"] is None:
            return as_command_line({"--data-path": lists["train"]})
        return as_command_line({"--train-data-path": lists["train"], "--valid-data-path": lists["valid"]})
    if fmt == "data-args":
        if lists["valid"] is not None:
            raise UsageError(
                "the datasets have a held-out split, which --data-args-path cannot carry",
                hint="use --format per-split (Megatron-LM --per-split-data-args-path FILE)",
            )
        return " ".join(lists["train"])
    if fmt == "per-split":
        return json.dumps(lists, indent=2)
    if fmt == "nemo":
        nemo = {"train": lists["train"], "validation": lists["valid"] or [], "test": []}
        return json.dumps(nemo, indent=2)
    raise UsageError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
