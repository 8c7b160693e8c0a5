"""`dataset list`, `dataset inspect` (decoding back to the source text) and `dataset blend`, whose
output megatron-core's BlendedMegatronDatasetBuilder builds training and validation data from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.unit.pipeline.helpers import TOKENIZER, read_megatron, sample_records, write_jsonl


def prepare(tmp_path: Path, capsys: Any, name: str, records: list[dict[str, Any]], *extra: str) -> Path:
    write_jsonl(tmp_path / f"{name}.jsonl", records)
    args = ["prepare", "dataset", "-i", f"{name}.jsonl", "--tokenizer", TOKENIZER, "--name", name, "--quiet",
            "--shard-size", "16KiB", "--workers", "1", *extra]  # fmt: skip
    res = run_cli(args, capsys)
    assert res.code == 0, res.stderr
    return tmp_path / "storage" / "datasets" / "text" / name / "v1"


@pytest.fixture
def two(tmp_path: Path, monkeypatch: Any, capsys: Any) -> tuple[Path, Path, list[dict[str, Any]]]:
    monkeypatch.chdir(tmp_path)
    web_records = sample_records(limit_bytes=50_000)
    web = prepare(tmp_path, capsys, "web", web_records)
    code = prepare(tmp_path, capsys, "code", sample_records(limit_bytes=60_000), "--holdout", "0.4")
    return web, code, web_records


def test_list_shows_every_dataset_with_its_state(
    two: tuple[Path, Path, Any], tmp_path: Path, capsys: Any
) -> None:
    web, code, _ = two
    (tmp_path / "storage/datasets/text/half/v1").mkdir(parents=True)
    (code / "train-00000.bin").unlink()
    res = run_cli(["dataset", "list", "--json"], capsys)
    assert res.code == 0, res.stderr
    entries = {e["path"]: e for e in res.json()["datasets"]}
    assert set(entries) == {"datasets/text/web/v1", "datasets/text/code/v1", "datasets/text/half/v1"}
    manifest = json.loads((web / "manifest.json").read_text())
    assert entries["datasets/text/web/v1"]["state"] == "ok"
    assert entries["datasets/text/web/v1"]["tokens"] == manifest["splits"]["train"]["tokens"]
    assert entries["datasets/text/web/v1"]["shards"] == len(manifest["shards"])
    assert entries["datasets/text/web/v1"]["tokenizer"] == TOKENIZER
    assert entries["datasets/text/code/v1"]["state"] == "incomplete"
    assert entries["datasets/text/code/v1"]["problem"] == "train-00000.bin is missing"
    assert entries["datasets/text/half/v1"]["state"] == "uncommitted"


def test_inspect_decodes_documents_back_to_their_text(two: tuple[Path, Path, Any], capsys: Any) -> None:
    web, _, records = two
    res = run_cli(
        ["dataset", "inspect", "datasets/text/web/v1", "--docs", "2", "--show-chars", "0", "--json"], capsys
    )
    assert res.code == 0, res.stderr
    docs = res.json()["documents"]
    shard = read_megatron(web / "train-00000")
    assert [d["index"] for d in docs] == [0, 1]
    assert [d["tokens"] for d in docs] == [len(shard.documents[0]), len(shard.documents[1])]
    eos = json.loads((web / "manifest.json").read_text())["tokenizer"]["eos"]["token"]
    assert [d["text"] for d in docs] == [records[0]["text"] + eos, records[1]["text"] + eos]
    res = run_cli(["dataset", "inspect", "datasets/text/web/v1", "--shard", "nope"], capsys)
    assert res.code == 3 and "no shard 'nope'" in res.stderr


def test_blend_is_what_megatron_core_builds_its_datasets_from(
    two: tuple[Path, Path, Any], tmp_path: Path, capsys: Any
) -> None:
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.utils import get_blend_from_list

    web, code, _ = two
    res = run_cli(["dataset", "blend", "datasets/text/web/v1=0.75", "datasets/text/code/v1=0.25",
                   "--format", "per-split", "-o", "blend.json"], capsys)  # fmt: skip
    assert res.code == 0, res.stderr
    per_split = json.loads((tmp_path / "blend.json").read_text())  # as Megatron-LM reads the file
    blends = [get_blend_from_list(per_split[s]) for s in ("train", "valid", "test")]
    train_prefixes, train_weights = blends[0]
    web_shards = sorted(str(p.with_suffix("")) for p in web.glob("train-*.bin"))
    code_shards = sorted(str(p.with_suffix("")) for p in code.glob("train-*.bin"))
    assert sorted(train_prefixes) == sorted(web_shards + code_shards)
    weight = dict(zip(train_prefixes, train_weights, strict=True))
    assert sum(weight[p] for p in web_shards) == pytest.approx(0.75, abs=1e-6)
    assert blends[1][0] == sorted(str(p.with_suffix("")) for p in code.glob("holdout-*.bin"))
    assert blends[2] is None

    manifest = json.loads((web / "manifest.json").read_text())

    class DatasetTokenizer:  # the ids GPTDataset needs, from the manifest of the dataset itself
        def __init__(self, entry: dict[str, Any]) -> None:
            self.vocab_size = entry["vocab_size"]
            self.eod = entry["eos"]["id"]
            self.pad = -1
            self.unique_identifiers = {"tokenizer_xxh3_128": entry["xxh3_128"]}  # names its cache

    config = GPTDatasetConfig(
        random_seed=1234,
        sequence_length=64,
        blend_per_split=blends,
        path_to_cache=str(tmp_path / "cache"),
        tokenizer=DatasetTokenizer(manifest["tokenizer"]),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        mmap_bin_files=False,
    )
    import torch.distributed as dist

    # as under torchrun: one rank of a process group (a file store: no network)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        built = BlendedMegatronDatasetBuilder(GPTDataset, [200, 20, 0], lambda: True, config).build()
    finally:
        dist.destroy_process_group()
    train, valid, test = built
    assert test is None and len(train) >= 200 and len(valid) >= 20
    streams = {p: np.concatenate(read_megatron(Path(p)).documents) for p in train_prefixes}
    for i in range(0, 200, 37):
        sample = train[i]["tokens"].numpy()  # 64 consecutive tokens of one of our shards
        assert any(_contains(stream, sample) for stream in streams.values()), i


def _contains(stream: np.ndarray[Any, Any], window: np.ndarray[Any, Any]) -> bool:
    starts = np.nonzero(stream[: len(stream) - len(window) + 1] == window[0])[0]
    return any(np.array_equal(stream[s : s + len(window)], window) for s in starts)


def test_blend_by_tokens_prints_megatron_arguments(two: tuple[Path, Path, Any], capsys: Any) -> None:
    res = run_cli(["dataset", "blend", "datasets/text/web/v1"], capsys)
    assert res.code == 0, res.stderr
    assert res.stdout.startswith("--data-path ")
    blend = get_blend(res.stdout.split()[1:])
    manifest = json.loads((two[0] / "manifest.json").read_text())
    tokens = [s["tokens"] for s in manifest["shards"]]
    assert blend[1] == pytest.approx([t / sum(tokens) for t in tokens], rel=1e-6)
    mixed = run_cli(["dataset", "blend", "datasets/text/web/v1=1", "datasets/text/code/v1"], capsys)
    assert mixed.code == 2 and "to every dataset" in mixed.stderr
    holdout = run_cli(["dataset", "blend", "datasets/text/code/v1", "--format", "data-args"], capsys)
    assert holdout.code == 2 and "per-split" in holdout.stderr


def get_blend(values: list[str]) -> Any:
    from megatron.core.datasets.utils import get_blend_from_list

    return get_blend_from_list(values)
