"""`dataset verify` trusts no single field of the manifest; damaged manifests, paths that leave the
dataset and odd inputs give one line and the right exit code (4 for anything verification finds),
never a traceback, and `--json` still prints one document."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from storekit.pipeline.prepare import check_space
from tests.conftest import run_cli, run_in_process, run_storekit
from tests.unit.pipeline.helpers import TOKENIZER, sample_records, write_jsonl

FINAL = Path("storage/datasets/text/vs/v1")
BASE = ["prepare", "dataset", "--tokenizer", TOKENIZER, "--name", "vs", "--json", "--quiet", "--workers", "1"]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One prepared dataset; each test gets its own copy to damage."""
    root = tmp_path_factory.mktemp("verify")
    write_jsonl(root / "a.jsonl", sample_records(limit_bytes=30_000, max_doc=4_000))
    res = run_in_process([*BASE, "-i", "a.jsonl", "--shard-size", "8KiB"], cwd=root)
    assert res.code == 0, res.stderr
    assert len(json.loads((root / FINAL / "manifest.json").read_bytes())["shards"]) >= 2
    return root / "storage"


@pytest.fixture
def dataset(template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(template, tmp_path / "storage", symlinks=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path / FINAL


def _edit(dataset: Path, change: Any) -> None:
    path = dataset / "manifest.json"
    doc = json.loads(path.read_bytes())
    change(doc)
    path.write_text(json.dumps(doc))


def _corrupt(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _verify(capsys: Any, command: str = "verify") -> tuple[int, dict[str, Any], str]:
    res = run_cli(["dataset", command, "datasets/text/vs/v1", "--json"], capsys)
    return res.code, res.json(), res.stderr


def test_clean_dataset_verifies(dataset: Path, capsys: Any) -> None:
    code, doc, _ = _verify(capsys)
    assert code == 0 and doc["ok"], doc


@pytest.mark.parametrize("how", ["drop-entry", "empty-list"])
def test_a_shard_missing_from_files_is_still_verified(dataset: Path, capsys: Any, how: str) -> None:
    bin_name = json.loads((dataset / "manifest.json").read_bytes())["shards"][0]["bin"]

    def drop(doc: dict[str, Any]) -> None:
        doc["files"] = [] if how == "empty-list" else [f for f in doc["files"] if f["path"] != bin_name]

    _edit(dataset, drop)
    _corrupt(dataset / bin_name)
    code, doc, _ = _verify(capsys)
    assert code == 4
    problems = {(p["path"], p["problem"].split(" ")[0]) for p in doc["problems"]}
    assert (bin_name, "named") in problems  # not listed in files[]
    assert (bin_name, "xxh3-128") in problems  # and its bytes differ from shards[]


def test_shards_and_files_digests_must_agree(dataset: Path, capsys: Any) -> None:
    def skew(doc: dict[str, Any]) -> None:
        doc["shards"][0]["xxh3_128"] = "0" * 32

    _edit(dataset, skew)
    code, doc, _ = _verify(capsys)
    assert code == 4 and any("shards[] says xxh3-128" in p["problem"] for p in doc["problems"])


def test_a_file_the_manifest_does_not_list_is_reported(dataset: Path, capsys: Any) -> None:
    (dataset / "train-00099.bin").write_bytes(b"\x00" * 16)
    code, doc, _ = _verify(capsys)
    assert code == 4
    assert {"path": "train-00099.bin", "problem": "in the dataset but not listed in the manifest"} in doc[
        "problems"
    ]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(shards=None), "shards is not a list"),
        (lambda d: d.update(shards=[1]), "shards[0] is not a table"),
        (lambda d: d.update(stats="many"), "stats is not a table"),
        (lambda d: d.update(files=None), "files is not a list"),
        (lambda d: d["files"][0].update(path="../../../etc/passwd"), "outside its directory"),
        (lambda d: d["shards"][0].update(bin="../x.bin"), "outside the dataset"),
    ],
    ids=["shards-null", "shard-not-table", "stats-string", "files-null", "files-dotdot", "shard-dotdot"],
)
@pytest.mark.parametrize("command", ["verify", "info"])
def test_a_damaged_manifest_is_a_mismatch_in_one_line(
    dataset: Path, capsys: Any, change: Any, message: str, command: str
) -> None:
    _edit(dataset, change)
    code, doc, err = _verify(capsys, command)
    assert code == 4, err
    assert message in doc["error"]["message"] and doc["error"]["exit_code"] == 4
    assert err.startswith("error: ") and "Traceback" not in err


def test_a_manifest_that_is_not_json_is_a_mismatch(dataset: Path, capsys: Any) -> None:
    (dataset / "manifest.json").write_text('{"schema_version": 1, "kind": "dat')
    code, doc, err = _verify(capsys)
    assert code == 4 and "not a valid manifest" in doc["error"]["message"], err


def test_a_symlink_out_of_the_tier_is_a_mismatch(dataset: Path, capsys: Any, tmp_path: Path) -> None:
    manifest = json.loads((dataset / "manifest.json").read_bytes())
    target = dataset / manifest["shards"][0]["bin"]
    outside = tmp_path / "outside.bin"
    outside.write_bytes(target.read_bytes())
    target.unlink()
    target.symlink_to(outside)
    code, doc, err = _verify(capsys)
    assert code == 4, err
    assert any("leaves the tier" in p["problem"] for p in doc["problems"])


# -- item 10: a garbage .jsonl.zst is bad input, not a traceback ----------------------------------
def test_a_garbage_zst_file_is_counted_as_bad_input(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "g.jsonl.zst").write_bytes(os.urandom(5000))
    write_jsonl(tmp_path / "ok.jsonl", sample_records(limit_bytes=2_000))
    res = run_cli([*BASE, "-i", "g.jsonl.zst", "-i", "ok.jsonl"], capsys)
    assert res.code == 0, res.stderr
    assert res.json()["manifest"]["stats"]["errors"] == {"truncated_input": 1}
    fail = run_cli([*BASE, "-i", "g.jsonl.zst", "--on-error", "fail", "--name", "g"], capsys)
    assert fail.code == 1 and "g.jsonl.zst" in fail.json()["error"]["message"], fail.stderr


# -- item 13: the free-space check is an upper bound from bytes and dtype -------------------------
def test_free_space_bound_holds_for_text_with_few_bytes_per_token(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """Digits and punctuation tokenize at ~1.3 bytes a token: more than the old estimate assumed
    (3 bytes a token); the bound (one token per input byte) still covers the real shards."""
    import random

    monkeypatch.chdir(tmp_path)
    rng = random.Random(7)
    docs = [{"text": " ".join(str(rng.randrange(10**6)) + rng.choice(",;:!?") for _ in range(400))}]
    write_jsonl(tmp_path / "digits.jsonl", docs * 1 + [{"text": d["text"][::-1]} for d in docs])
    res = run_cli([*BASE, "-i", "digits.jsonl", "--name", "digits", "--no-dedup"], capsys)
    assert res.code == 0, res.stderr
    doc = res.json()
    stats, plan = doc["manifest"]["stats"], doc["plan"]
    bin_bytes = stats["tokens"] * 2
    assert plan["input_bytes"] / stats["tokens"] < 3  # the old floor did not hold for this text
    assert bin_bytes <= plan["estimated_output_bytes_max"]


def test_free_space_check_refuses_below_the_bound(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    import storekit.pipeline.prepare as prepare_module
    from storekit.cli.common import site_config
    from storekit.errors import NoSpaceError
    from storekit.pipeline.inputs import InputFS
    from storekit.pipeline.prepare import make_plan
    from storekit.pipeline.spec import CLI_SOURCE, build_spec

    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", sample_records(limit_bytes=20_000))
    spec = build_spec(CLI_SOURCE, {"name": "a"}, {"inputs": ("a.jsonl",), "tokenizer": TOKENIZER})
    site = site_config(None)
    plan, location, work, _ = make_plan(spec, site, InputFS(site))
    bound = plan.max_output_bytes
    assert bound >= plan.total_bytes * 2  # uint16: two bytes a token, a token per byte at most
    free = {"bytes": 2 * bound - 1}  # one device for work dir and output: both need the bound
    monkeypatch.setattr(prepare_module, "_device_and_free", lambda path: (1, free["bytes"]))

    with pytest.raises(NoSpaceError, match="may need up to"):
        check_space(plan, location, work)
    free["bytes"] = 2 * bound
    check_space(plan, location, work)


# -- item 14: stop signals while the command is starting ------------------------------------------
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGUSR1"])
def test_a_stop_signal_while_starting_exits_130(tmp_path: Path, signame: str) -> None:
    res = run_storekit(
        ["layout", "check", "--json"], cwd=tmp_path, env={"STOREKIT_TEST_SIGNAL_AT_START": signame}
    )
    assert res.code == 130, (res.code, res.stderr)
    assert res.code != -getattr(signal, signame)
    assert res.stderr.startswith("error: interrupted")
    assert json.loads(res.stdout)["error"]["exit_code"] == 130


def test_a_tier_at_the_file_system_root_names_the_path_in_errors(tmp_path: Path, capsys: Any) -> None:
    config = tmp_path / "sk.toml"
    config.write_text('[tiers.root]\nurl = "file:///"\n')
    from storekit.config import TierConfig
    from storekit.store import open_store

    store = open_store(TierConfig(name="root", url="file:///"))
    assert store.rel("/") == "" and store.rel("/etc") == "etc"
    assert store.full("etc") == "/etc"
    res = run_cli(["dataset", "verify", "nowhere/v1", "--config", str(config), "--json"], capsys)
    assert res.code == 3 and "/nowhere/v1" in res.json()["error"]["message"]
