"""BenchSpec validation and the plan's files and sizes (e.g. --model 7b --ranks 8)."""

from __future__ import annotations

from typing import Any

import pytest

from storekit.bench.patterns import build_plan
from storekit.bench.spec import MODEL_PRESETS, BenchSpec, TargetSpec, build_spec, parse_size
from storekit.errors import UsageError

MiB = 1024 * 1024
TARGET = TargetSpec(kind="posix", root="/nonexistent/target")


def spec(**options: Any) -> BenchSpec:
    return build_spec(TARGET, **options)


def test_sizes_read_like_fio_binary_suffixes_and_decimal_units() -> None:
    assert parse_size("1M", "--x") == MiB
    assert parse_size("4k", "--x") == 4096
    assert parse_size("1MiB", "--x") == MiB
    assert parse_size("1MB", "--x") == 1_000_000
    assert parse_size("2G", "--x") == 2 * 1024**3


def test_model_presets_size_checkpoints_with_adam_state() -> None:
    s = spec(model="7b")
    assert s.model.params == MODEL_PRESETS["7b"]
    assert s.model.checkpoint_bytes == int(6.74e9 * (2 + 12))
    custom = spec(model="3.2b", bytes_per_param=4, optimizer_bytes_per_param=0)
    assert custom.model.checkpoint_bytes == int(3.2e9 * 4)
    assert spec(model="350m").model.params == 350e6


def test_plan_for_7b_on_8_ranks_writes_an_equal_sample_per_rank() -> None:
    s = spec(pattern="checkpoint", model="7b", ranks=8, size="512M", block_size="1M")
    plan = build_plan(s, "t", "/run")
    (point,) = plan.points
    write, read = point.phases
    assert [t.file_size for t in write.tasks] == [64 * MiB] * 8
    assert write.bytes == read.bytes == 512 * MiB
    assert [tuple(t.files) for t in write.tasks] == [
        (f"checkpoint/step_000001/rank_{r:05d}.distcp",) for r in range(8)
    ]
    # every rank reads another rank's file: nobody reads back its own page cache
    assert [t.files[0] for t in read.tasks] == [write.tasks[(r + 1) % 8].files[0] for r in range(8)]
    assert all(t.fsync and t.direct for t in write.tasks)
    assert plan.peak_bytes == 512 * MiB
    assert plan.notes and "sample" in plan.notes[0]


def test_full_checkpoint_plans_the_whole_model_share_per_rank() -> None:
    s = spec(pattern="checkpoint", model="7b", ranks=8, full_checkpoint=True, block_size="4M")
    plan = build_plan(s, "t", "/run")
    share = -(-int(6.74e9 * 14) // 8)
    per_rank = plan.points[0].phases[0].tasks[0].file_size
    assert per_rank >= share and per_rank - share < 4 * MiB and per_rank % (4 * MiB) == 0
    assert plan.peak_bytes == per_rank * 8
    assert plan.space_needed > plan.peak_bytes


def test_shards_split_files_round_robin_and_sweep_workers_and_block_sizes() -> None:
    s = spec(pattern="shards", size="64M", file_size="8M", workers="1,4", block_size="1M,4M")
    plan = build_plan(s, "t", "/run")
    assert [p.params for p in plan.points] == [
        {"workers": 1, "block_size": MiB},
        {"workers": 4, "block_size": MiB},
        {"workers": 1, "block_size": 4 * MiB},
        {"workers": 4, "block_size": 4 * MiB},
    ]
    four = plan.points[1].phases[0]
    assert [len(t.files) for t in four.tasks] == [2, 2, 2, 2]
    assert sorted(f for t in four.tasks for f in t.files) == [f"shards/shard_{i:05d}.bin" for i in range(8)]
    assert plan.total_bytes() == 4 * 2 * 64 * MiB * 3


def test_tokens_and_meta_plans() -> None:
    s = spec(pattern="tokens,meta", size="64M", file_size="16M", workers="2", queue_depth="1,8", files=10)
    plan = build_plan(s, "t", "/run")
    assert plan.setups[0].phase.bytes == 64 * MiB
    tokens = [p for p in plan.points if p.pattern == "tokens"]
    assert [p.params["queue_depth"] for p in tokens] == [1, 8]
    assert tokens[0].phases[0].bytes is None  # time-based
    assert tokens[0].phases[0].tasks[0].window == 4096 * 2
    meta = [p for p in plan.points if p.pattern == "meta"]
    assert [p.params["dirs"] for p in meta] == ["unique", "shared"]
    assert [ph.name for ph in meta[0].phases] == ["create", "stat", "read", "delete"]
    create, stat = meta[0].phases[0], meta[0].phases[1]
    assert create.tasks[1].meta_names()[0] == "meta-unique/w0001/w0001.00000000"
    assert stat.tasks[1].meta_owner == 0  # worker 1 stats worker 0's files
    assert len(list(plan.created_paths())) == 4 + 2 * 2 * 10  # token shards + meta files of both modes


def test_config_hash_is_stable_and_tracks_parameters() -> None:
    assert spec().config_hash() == spec().config_hash()
    assert spec().config_hash() != spec(block_size="4M").config_hash()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"block_size": "1000"}, "not a multiple of 4096"),
        ({"size": "0"}, "greater than 0"),
        ({"size": "-1M"}, "negative"),
        ({"file_size": "1M", "block_size": "4M"}, "smaller than --block-size"),
        ({"file_size": "6M", "block_size": "4M"}, "not a multiple of --block-size"),
        ({"size": "100M", "file_size": "32M"}, "whole number of files"),
        ({"size": "64M", "file_size": "32M", "workers": "4", "pattern": "shards"}, "cannot give each"),
        ({"pattern": "shards,bogus"}, "expected one of"),
        ({"workers": "0"}, "--workers"),
        ({"workers": "1,x"}, "not a whole number"),
        ({"queue_depth": "0"}, "--queue-depth"),
        ({"repeat": 0}, "--repeat"),
        ({"duration": "soon"}, "--duration"),
        ({"model": "huge"}, "--model"),
        ({"seq_len": 10_000_000, "token_bytes": 4, "file_size": "32M", "pattern": "tokens"}, "does not fit"),
        ({"pattern": "checkpoint", "size": "4M", "ranks": 8}, "less than one block"),
        ({"files": 0}, "--files"),
        ({"target_checkpoint_s": 0}, "greater than 0"),
    ],
)
def test_nonsense_is_a_usage_error_naming_the_option(options: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message) as info:
        spec(**options)
    assert int(info.value.exit_code) == 2


def test_unaligned_block_sizes_are_fine_without_o_direct_or_on_s3() -> None:
    assert spec(block_size="1000", file_size="1000000", size="8000000", direct=False).block_sizes == (1000,)
    s3 = TargetSpec(kind="s3", root="bucket/prefix")
    assert build_spec(s3, block_size="1000", file_size="1000000", size="8000000").block_sizes == (1000,)
