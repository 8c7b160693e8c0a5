"""The `--data-path` arguments Megatron-LM and NeMo take for prepared datasets.

Megatron reads an indexed dataset by its path prefix (`.../train-00000` for `train-00000.bin/.idx`)
and a blend as `WEIGHT PREFIX WEIGHT PREFIX ...`, normalising the weights itself. Each shard is
weighted by its tokens, so a dataset split over many shards is sampled as one. A dataset with a
held-out split gets `--train-data-path`/`--valid-data-path` (with which Megatron needs no `--split`).
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

VALID_SPLITS = ("holdout",)  # storekit's held-out split is Megatron's validation data


@dataclass(frozen=True)
class Prefix:
    split: str  # train | holdout
    path: str  # without .bin/.idx
    tokens: int
    weight: float  # within its split, before Megatron normalises


def shard_prefixes(manifest_body: dict[str, Any], dataset_path: str, *, scale: float = 1.0) -> list[Prefix]:
    """Every shard of one dataset as a Megatron prefix; `scale` multiplies its weights (for blends)."""
    shards = manifest_body.get("shards", [])
    out = []
    for shard in shards:
        tokens = int(shard["tokens"])
        if tokens == 0:
            continue  # Megatron refuses empty datasets in a blend
        out.append(
            Prefix(shard["split"], posixpath.join(dataset_path, shard["name"]), tokens, tokens * scale)
        )
    return out


def _weights_and_paths(prefixes: Sequence[Prefix]) -> list[str]:
    total = sum(p.weight for p in prefixes) or 1.0
    args: list[str] = []
    for p in prefixes:
        args += [f"{p.weight / total:.6g}", p.path]
    return args


def data_path_args(prefixes: Sequence[Prefix]) -> dict[str, list[str]]:
    """{"--data-path": [...]} or {"--train-data-path": [...], "--valid-data-path": [...]}."""
    train = [p for p in prefixes if p.split not in VALID_SPLITS]
    valid = [p for p in prefixes if p.split in VALID_SPLITS]
    if not valid:
        return {"--data-path": _weights_and_paths(train)}
    return {"--train-data-path": _weights_and_paths(train), "--valid-data-path": _weights_and_paths(valid)}


def as_command_line(args: dict[str, list[str]]) -> str:
    return " ".join(f"{flag} {' '.join(values)}" for flag, values in args.items())
