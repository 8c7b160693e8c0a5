"""`storekit bench io` against the real Ceph RGW: every pattern, cleanup, bucket errors, no secrets shown."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from storekit.bench.schema import validate
from storekit.bench.scratch import S3Scratch, open_scratch
from storekit.bench.spec import TargetSpec
from storekit.config import TierConfig
from storekit.store import S3Store, Store
from tests.conftest import Ran, run_storekit

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.ceph


def storekit(*args: str, env: dict[str, str]) -> Ran:
    return run_storekit(args, env=env, timeout=300)


def aws_env(tier: TierConfig) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": tier.options["key"],
        "AWS_SECRET_ACCESS_KEY": tier.options["secret"],
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def all_keys(store: Store) -> set[str]:
    return {e.path for e in store.walk("") if not e.is_dir}


@pytest.mark.slow
def test_every_pattern_on_s3_moves_the_planned_bytes_and_removes_its_objects(
    s3_tier: TierConfig, s3_store: Store
) -> None:
    s3_store.write_bytes("datasets/text/part-0.bin", b"not the benchmark's")
    before = all_keys(s3_store)
    bucket_prefix = s3_tier.url  # s3://bucket/storage
    proc = storekit(
        "bench", "io", "--target", bucket_prefix, "--endpoint-url", s3_tier.options["endpoint_url"],
        "--pattern", "all", "--size", "32M", "--file-size", "16M", "--workers", "2", "--repeat", "1",
        "--block-size", "1M", "--queue-depth", "4", "--duration", "0.3", "--files", "10", "--ranks", "2",
        # 64 KiB: RGW answers 1-8 KiB GETs after a 40 ms delayed-ACK stall, which only slows the test
        "--seq-len", "32768", "--small-file-size", "64k", "--json",
        env=aws_env(s3_tier),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert validate(doc) == []
    assert doc["environment"]["target_kind"] == "s3" and doc["honesty"]["direct"]["effective"] is False
    seen = set()
    for point in doc["results"]:
        for ph in point["phases"]:
            seen.add((point["pattern"], ph["phase"]))
            rep = ph["repeats"][0]
            if ph["planned_bytes_per_repeat"] is not None:
                assert rep["bytes"] == ph["planned_bytes_per_repeat"], (point["label"], ph["phase"])
            if ph["op"] == "randread":
                assert rep["bytes"] == rep["ops"] * 65536 and rep["ops"] > 0
            if ph["phase"] == "list":
                assert rep["ops"] == 10 * point["params"]["workers"]  # every object listed
            if ph["phase"] == "write" and point["pattern"] == "shards":
                assert rep["ops"] == 4  # two 16 MiB objects, each a 2-part multipart upload
    assert {("meta", p) for p in ("put", "list", "head", "get", "delete")} <= seen
    assert {("shards", "write"), ("shards", "read"), ("checkpoint", "write"), ("tokens", "randread")} <= seen
    assert all_keys(s3_store) == before
    uploads = s3_store.client.list_multipart_uploads(Bucket=s3_tier.url[5:].split("/")[0])
    assert not uploads.get("Uploads")
    assert "testsecret" not in proc.stdout + proc.stderr


def test_a_tier_with_credentials_in_the_config_never_shows_them(s3_tier: TierConfig, tmp_path: Path) -> None:
    config = tmp_path / "storekit.toml"
    o = s3_tier.options
    config.write_text(
        f'[tiers.archive]\nurl = "{s3_tier.url}"\nrole = "archive"\n'
        f'options = {{ endpoint_url = "{o["endpoint_url"]}", key = "{o["key"]}", '
        f'secret = "{o["secret"]}" }}\n'
    )
    proc = storekit("bench", "io", "--config", str(config), "--tier", "archive", "--pattern", "meta",
                    "--workers", "1", "--repeat", "1", "--files", "5", "--small-file-size", "0",
                    "--json", env={})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["environment"]["bucket"] == s3_tier.url[5:].split("/")[0]
    assert o["secret"] not in proc.stdout + proc.stderr


def test_a_bucket_that_does_not_exist_is_not_found(s3_tier: TierConfig) -> None:
    proc = storekit("bench", "io", "--target", "s3://sk-no-such-bucket-4d1f/x", "--endpoint-url",
                    s3_tier.options["endpoint_url"], env=aws_env(s3_tier))  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("error: bucket 'sk-no-such-bucket-4d1f' does not exist") and len(lines) <= 2


def test_the_scratch_cleanup_checks_every_key_and_reports_what_the_gateway_kept(
    s3_tier: TierConfig, s3_store: S3Store
) -> None:
    """The run's objects go through store.s3delete: a key the gateway refuses to delete is neither
    counted as removed nor hidden; it is reported as a leftover, and the other keys are gone."""
    target = TargetSpec(kind="s3", root=s3_store.root, endpoint_url=s3_tier.options["endpoint_url"])
    target = dataclasses.replace(target, s3_options=s3_tier.options)
    scratch = open_scratch(target, "cleanup-1")
    assert isinstance(scratch, S3Scratch)
    scratch.check(0)
    scratch.create()
    made = ["rank0/a", "locked/b", "rank1/c"]
    for rel in made:
        s3_store.client.put_object(Bucket=s3_store.bucket, Key=scratch.full(rel), Body=b"x")
    locked = f"arn:aws:s3:::{s3_store.bucket}/{scratch.full('locked')}/*"
    policy = {"Effect": "Deny", "Principal": "*", "Action": "s3:DeleteObject", "Resource": locked}
    s3_store.client.put_bucket_policy(
        Bucket=s3_store.bucket, Policy=json.dumps({"Version": "2012-10-17", "Statement": [policy]})
    )
    try:
        out = scratch.cleanup(made)
    finally:
        s3_store.client.delete_bucket_policy(Bucket=s3_store.bucket)
    assert out["removed_files"] == 3  # rank0/a, rank1/c and the run's probe object
    assert out["leftovers"] == [f"s3://{s3_store.bucket}/{scratch.full('locked/b')}"]
    assert {k for k in all_keys(s3_store) if "storekit-bench-" in k} == {
        s3_store.rel(f"{s3_store.bucket}/{scratch.full('locked/b')}")
    }
