"""The S3 transfer engine against the real Ceph RGW: bytes, digests, part counts, the in-flight cap,
journaled uploads resumed or aborted after a kill, a gateway restart ridden out, and checked deletes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import xxhash

from storekit import faults
from storekit.config import TierConfig
from storekit.errors import MismatchError, StorekitError
from storekit.ops.journal import FileUploadJournal
from storekit.ops.s3transfer import (
    DIGEST_META_KEY,
    DownloadItem,
    TransferConfig,
    UploadItem,
)
from storekit.ops.throttle import TokenBucket
from storekit.store.s3delete import DeleteFailed, check_unversioned, delete_keys, delete_prefix
from tests.integration.s3_helpers import (
    MiB,
    PrivateGateway,
    fresh_bucket,
    keys,
    tier_for,
    wait_for,
    write_random,
)

pytestmark = pytest.mark.ceph
REPO = Path(__file__).resolve().parents[2]
SMALL_PARTS = TransferConfig(min_part_size=5 * MiB, threads=4, max_in_flight_bytes=16 * MiB)


def test_multipart_with_metadata_round_trip(tmp_path: Path) -> None:
    big = write_random(tmp_path / "big.bin", 23 * MiB + 7, seed=1)
    small = write_random(tmp_path / "small.bin", 1000, seed=2)
    (tmp_path / "empty").write_bytes(b"")
    meta = {"run": "run_007", "note": "résumé"}  # non-ASCII travels RFC 2047-encoded
    with fresh_bucket(SMALL_PARTS) as engine:
        up = engine.upload_files(
            [
                UploadItem(str(tmp_path / "big.bin"), "ck/big.bin", meta),
                UploadItem(str(tmp_path / "small.bin"), "ck/small.bin", meta),
                UploadItem(str(tmp_path / "empty"), "ck/empty"),
            ]
        )
        assert [(r.size, r.parts) for r in up] == [(len(big), 5), (1000, 0), (0, 0)]
        assert [r.xxh3_128 for r in up] == [xxhash.xxh3_128_hexdigest(d) for d in (big, small, b"")]
        assert engine.budget.peak <= 16 * MiB  # memory stayed within the cap

        head = engine.client.head_object(Bucket=engine.bucket, Key="ck/big.bin")
        assert head["ETag"].endswith('-5"')  # a multipart ETag, never used as a digest
        store_meta = _decoded(engine, "ck/big.bin")
        assert store_meta == meta  # the digest is not known before a multipart upload starts
        assert not up[0].digest_in_metadata
        assert _decoded(engine, "ck/small.bin") == {**meta, DIGEST_META_KEY: up[1].xxh3_128}
        assert up[1].digest_in_metadata

        out = tmp_path / "out"
        out.mkdir()
        down = engine.download_files(
            [
                DownloadItem("ck/big.bin", str(out / "big.bin"), up[0].xxh3_128),
                DownloadItem("ck/small.bin", str(out / "small.bin")),
                DownloadItem("ck/empty", str(out / "empty")),
            ]
        )
        assert [d.xxh3_128 for d in down] == [r.xxh3_128 for r in up]
        assert (out / "big.bin").read_bytes() == big
        assert (out / "small.bin").read_bytes() == small
        assert (out / "empty").read_bytes() == b""
        assert sorted(os.listdir(out)) == ["big.bin", "empty", "small.bin"]  # no temp left


def _decoded(engine: object, key: str) -> dict[str, str]:
    from storekit.store import decode_s3_metadata

    head = engine.client.head_object(Bucket=engine.bucket, Key=key)  # type: ignore[attr-defined]
    return decode_s3_metadata(head["Metadata"])


def test_part_count_ceiling_grows_parts_instead(tmp_path: Path) -> None:
    data = write_random(tmp_path / "f", 48 * MiB, seed=3)  # 10 parts of 5 MiB over a ceiling of 4
    config = TransferConfig(min_part_size=5 * MiB, max_parts=4, threads=2, max_in_flight_bytes=64 * MiB)
    with fresh_bucket(config) as engine:
        [result] = engine.upload_files([UploadItem(str(tmp_path / "f"), "f")])
        assert result.parts == 3  # 95 % of the lowered ceiling
        head = engine.client.head_object(Bucket=engine.bucket, Key="f")
        assert head["ETag"].endswith('-3"') and head["ContentLength"] == len(data)
        engine.download_files([DownloadItem("f", str(tmp_path / "back"), result.xxh3_128)])
        assert (tmp_path / "back").read_bytes() == data


def rewriter(path: Path) -> Callable[[], None]:
    """What a writer does to a checkpoint file in place: new bytes at its start, a new mtime."""

    def rewrite() -> None:
        with open(path, "r+b") as fh:
            fh.write(b"\xff" * 4096)
        os.utime(path, ns=(1, 1_800_000_000_000_000_000))

    return rewrite


def test_a_source_rewritten_while_its_parts_go_out_fails_the_upload(tmp_path: Path) -> None:
    """Parts are sent from the file's pages after they were hashed: bytes rewritten in place while
    they go out (the last part's send is the moment) must fail the upload, never complete it."""
    path = tmp_path / "ckpt.bin"
    write_random(path, 12 * MiB + 5, seed=11)  # 3 parts of 5 MiB

    rewrite = rewriter(path)
    with fresh_bucket(SMALL_PARTS) as engine:
        with faults.at("transfer.part-sent", rewrite), pytest.raises(StorekitError, match="changed while"):
            engine.upload_files([UploadItem(str(path), "ckpt.bin")])
        assert keys(engine) == []
        assert engine.client.list_multipart_uploads(Bucket=engine.bucket).get("Uploads", []) == []


def test_a_failed_upload_is_aborted_only_after_its_last_part_went_out(tmp_path: Path) -> None:
    """A part the gateway takes after the abort brings the upload back on RGW (listed again, with its
    parts, and nothing would ever abort it). Forced order: the source changes before any part is read,
    and every part is held before it is sent until the upload has failed; then no part may still be
    going out, or start, once the abort is sent."""
    path = tmp_path / "ckpt.bin"
    write_random(path, 12 * MiB + 5, seed=12)  # 3 parts of 5 MiB

    rewrite = rewriter(path)
    failed = threading.Event()
    lock = threading.Lock()
    state = {"sending": 0, "aborts": 0, "overlaps": 0}
    with fresh_bucket(SMALL_PARTS) as engine:
        client = engine.client
        upload_part, abort_upload = client.upload_part, client.abort_multipart_upload

        def send_part(**kwargs: Any) -> Any:
            with lock:
                state["sending"] += 1
                state["overlaps"] += state["aborts"]  # a part started after the abort went out
            try:
                return upload_part(**kwargs)
            finally:
                with lock:
                    state["sending"] -= 1

        def abort(**kwargs: Any) -> Any:
            with lock:
                state["aborts"] += 1
                state["overlaps"] += state["sending"]  # parts still going out at the abort
            return abort_upload(**kwargs)

        client.upload_part, client.abort_multipart_upload = send_part, abort

        def hold() -> None:
            assert failed.wait(60), "the upload did not fail"

        with (
            faults.at("transfer.upload-created", rewrite),
            faults.at("transfer.upload-failed", failed.set),
            faults.at("transfer.part-sending", hold),
            pytest.raises(StorekitError, match="changed while"),
        ):
            engine.upload_files([UploadItem(str(path), "ckpt.bin")])
        assert state == {"sending": 0, "aborts": 1, "overlaps": 0}
        assert keys(engine) == []
        assert client.list_multipart_uploads(Bucket=engine.bucket).get("Uploads", []) == []


def test_a_wrong_expected_digest_leaves_nothing(tmp_path: Path) -> None:
    write_random(tmp_path / "f", 6 * MiB, seed=4)
    with fresh_bucket(SMALL_PARTS) as engine:
        engine.upload_files([UploadItem(str(tmp_path / "f"), "f")])
        dest = tmp_path / "dest"
        dest.mkdir()
        with pytest.raises(MismatchError, match=r"expected xxh3-128 0+, downloaded"):
            engine.download_files([DownloadItem("f", str(dest / "f"), "0" * 32)])
        assert os.listdir(dest) == []


def test_a_missing_source_is_named(tmp_path: Path) -> None:
    with fresh_bucket(SMALL_PARTS) as engine, pytest.raises(StorekitError, match="does not exist") as info:
        engine.upload_files([UploadItem(str(tmp_path / "nope"), "nope")])
    assert str(tmp_path / "nope") in str(info.value)


def test_the_bandwidth_cap_is_charged_every_byte(tmp_path: Path) -> None:
    """What the cap decides, with an injected clock: (bytes - burst) / rate seconds of waiting."""
    write_random(tmp_path / "big", 12 * MiB, seed=11)
    write_random(tmp_path / "small", 1000, seed=12)
    config = TransferConfig(min_part_size=5 * MiB, threads=1, max_in_flight_bytes=5 * MiB)
    clock = _FakeClock()
    with fresh_bucket(config) as engine:
        engine.bandwidth = TokenBucket(MiB, burst=MiB, clock=clock, sleep=clock.sleep)
        engine.upload_files([UploadItem(str(tmp_path / n), n) for n in ("big", "small")])
        sent = 12 * MiB + 1000
        assert clock.now == pytest.approx((sent - MiB) / MiB)
        engine.download_files([DownloadItem("big", str(tmp_path / "big.back"))])
        assert clock.now == pytest.approx((sent + 12 * MiB - MiB) / MiB)


@pytest.mark.parametrize("direct", [True, False], ids=["o_direct", "o_direct-refused"])
def test_downloads_split_into_direct_blocks_and_buffered_tails(
    tmp_path: Path, direct: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole blocks go O_DIRECT, a range's or file's partial block through the page cache; ranges
    whose offsets are not block-aligned, and filesystems that refuse O_DIRECT, go buffered."""
    from storekit.ops import s3download

    if direct:
        (tmp_path / "probe").write_bytes(b"")
        probe = s3download._open_direct(str(tmp_path / "probe"))
        assert probe >= 0, "this filesystem takes O_DIRECT: the direct path is what is tested"
        os.close(probe)
    else:
        monkeypatch.setattr(s3download, "_open_direct", lambda path: -1)
    sizes = {"aligned": 3 * MiB, "tail": 3 * MiB + 333, "tiny": 100, "empty": 0}
    data = {n: write_random(tmp_path / n, size, seed=20 + i) for i, (n, size) in enumerate(sizes.items())}
    odd = TransferConfig(min_part_size=5 * MiB, threads=3, max_in_flight_bytes=8 * MiB, range_size=MiB + 4196)
    for config in (SMALL_PARTS, odd):
        with fresh_bucket(config) as engine:
            up = engine.upload_files([UploadItem(str(tmp_path / n), n) for n in sizes])
            out = tmp_path / f"out-{config.range_size}"
            out.mkdir()
            items = [DownloadItem(n, str(out / n), r.xxh3_128) for n, r in zip(sizes, up, strict=True)]
            down = engine.download_files(items)
            assert [d.size for d in down] == list(sizes.values())
            for n in sizes:
                assert (out / n).read_bytes() == data[n], n
            assert sorted(os.listdir(out)) == sorted(sizes)  # no temp left


class _FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


_DOWNLOADER = """
import json, sys
from storekit import faults
from storekit.config import TierConfig
from storekit.ops.s3transfer import DownloadItem, S3Transfer, TransferConfig
tier = TierConfig(**json.loads(sys.argv[1]))
config = TransferConfig(range_size=5 * 2**20, threads=1, max_in_flight_bytes=5 * 2**20)
with S3Transfer.for_tier(tier, config=config) as engine:
    engine.download_files([DownloadItem(sys.argv[2], sys.argv[3])])
"""


def test_an_object_replaced_during_its_download_fails_it(tmp_path: Path) -> None:
    """Every ranged GET names the ETag the download started with: two versions are never mixed."""
    write_random(tmp_path / "v1", 12 * MiB, seed=13)
    events = tmp_path / "events"
    events.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    with fresh_bucket(SMALL_PARTS) as engine:
        engine.upload_files([UploadItem(str(tmp_path / "v1"), "obj")])
        tier = tier_for(engine.bucket)
        tier_json = json.dumps({"name": tier.name, "url": tier.url, "options": dict(tier.options)})
        proc = subprocess.Popen(
            [sys.executable, "-c", _DOWNLOADER, tier_json, "obj", str(dest / "obj")],
            env=_env("transfer.range-fetched=pause", STOREKIT_FAULT_DIR=str(events)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for("the first range fetched", (events / "transfer.range-fetched.reached").exists)
            engine.client.put_object(Bucket=engine.bucket, Key="obj", Body=b"version 2")
            (events / "transfer.range-fetched.go").touch()
            _, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 1
        assert "answered PreconditionFailed" in err
        assert os.listdir(dest) == []  # neither a mixed file nor a temp file


# -- kills at fault points: the journal resumes or aborts exactly what was in flight ------------------
_UPLOADER = """
import json, sys
from storekit import faults
from storekit.config import TierConfig
from storekit.ops.journal import FileUploadJournal
from storekit.ops.s3transfer import S3Transfer, TransferConfig, UploadItem
tier = TierConfig(**json.loads(sys.argv[1]))
config = TransferConfig(min_part_size=5 * 2**20, threads=1, max_in_flight_bytes=5 * 2**20)
with S3Transfer.for_tier(tier, config=config, journal=FileUploadJournal(sys.argv[2])) as engine:
    [r] = engine.upload_files([UploadItem(sys.argv[3], sys.argv[4])])
print(json.dumps({"xxh3": r.xxh3_128, "parts": r.parts}))
"""


def _uploader_args(tier: TierConfig, journal: Path, src: Path, key: str) -> list[str]:
    tier_json = json.dumps(
        {"name": tier.name, "url": tier.url, "role": tier.role, "options": dict(tier.options)}
    )
    return [sys.executable, "-c", _UPLOADER, tier_json, str(journal), str(src), key]


def _env(faults: str, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "STOREKIT_FAULTS": faults, **extra}


def _run_uploader(
    tier: TierConfig, journal: Path, src: Path, key: str, faults: str
) -> subprocess.CompletedProcess[str]:
    args = _uploader_args(tier, journal, src, key)
    return subprocess.run(args, env=_env(faults), capture_output=True, text=True, timeout=300)


def test_killed_upload_resumes_from_the_journal(tmp_path: Path) -> None:
    data = write_random(tmp_path / "ckpt.bin", 30 * MiB + 11, seed=5)  # 7 parts of 5 MiB
    journal = tmp_path / "uploads.json"
    with fresh_bucket(SMALL_PARTS, journal=FileUploadJournal(journal)) as engine:
        tier = tier_for(engine.bucket)
        run = _run_uploader(tier, journal, tmp_path / "ckpt.bin", "ckpt.bin", "transfer.part-sent@3=kill")
        assert run.returncode == -9, run.stderr
        [entry] = FileUploadJournal(journal).entries()
        assert entry.key == "ckpt.bin" and entry.upload_id
        listed = engine.client.list_parts(Bucket=engine.bucket, Key="ckpt.bin", UploadId=entry.upload_id)
        assert [p["PartNumber"] for p in listed["Parts"]] == [1, 2, 3]
        assert keys(engine) == []  # nothing visible: the object does not exist until completed

        [result] = engine.upload_files([UploadItem(str(tmp_path / "ckpt.bin"), "ckpt.bin")])
        assert (result.parts, result.reused_parts) == (7, 3)
        assert result.xxh3_128 == xxhash.xxh3_128_hexdigest(data)
        assert FileUploadJournal(journal).entries() == []
        assert engine.client.list_multipart_uploads(Bucket=engine.bucket).get("Uploads", []) == []
        got = engine.client.get_object(Bucket=engine.bucket, Key="ckpt.bin")["Body"].read()
        assert got == data


def test_a_changed_source_is_not_resumed(tmp_path: Path) -> None:
    write_random(tmp_path / "ckpt.bin", 12 * MiB, seed=6)
    journal = tmp_path / "uploads.json"
    with fresh_bucket(SMALL_PARTS, journal=FileUploadJournal(journal)) as engine:
        tier = tier_for(engine.bucket)
        run = _run_uploader(tier, journal, tmp_path / "ckpt.bin", "ckpt.bin", "transfer.part-sent@1=kill")
        assert run.returncode == -9, run.stderr
        new = write_random(tmp_path / "ckpt.bin", 12 * MiB, seed=7)  # rewritten by its owner meanwhile
        [result] = engine.upload_files([UploadItem(str(tmp_path / "ckpt.bin"), "ckpt.bin")])
        assert result.reused_parts == 0
        assert engine.client.get_object(Bucket=engine.bucket, Key="ckpt.bin")["Body"].read() == new
        assert engine.client.list_multipart_uploads(Bucket=engine.bucket).get("Uploads", []) == []


@pytest.mark.parametrize(
    "point", ["transfer.upload-created", "transfer.upload-journaled", "transfer.part-sent@2"]
)
def test_abort_takes_exactly_the_journaled_uploads(tmp_path: Path, point: str) -> None:
    write_random(tmp_path / "ckpt.bin", 12 * MiB, seed=8)
    journal = tmp_path / "uploads.json"
    with fresh_bucket(SMALL_PARTS, journal=FileUploadJournal(journal)) as engine:
        other = engine.client.create_multipart_upload(Bucket=engine.bucket, Key="someone-elses")["UploadId"]
        run = _run_uploader(
            tier_for(engine.bucket), journal, tmp_path / "ckpt.bin", "ckpt.bin", f"{point}=kill"
        )
        assert run.returncode == -9, run.stderr
        uploads = engine.client.list_multipart_uploads(Bucket=engine.bucket)["Uploads"]
        assert sorted(u["Key"] for u in uploads) == ["ckpt.bin", "someone-elses"]

        assert engine.abort_journaled() == ["ckpt.bin"]
        left = engine.client.list_multipart_uploads(Bucket=engine.bucket)["Uploads"]
        assert [(u["Key"], u["UploadId"]) for u in left] == [("someone-elses", other)]
        assert FileUploadJournal(journal).entries() == []


def test_an_unrecorded_create_answer_is_not_orphaned_by_a_rerun(tmp_path: Path) -> None:
    data = write_random(tmp_path / "ckpt.bin", 12 * MiB, seed=10)
    journal = tmp_path / "uploads.json"
    with fresh_bucket(SMALL_PARTS, journal=FileUploadJournal(journal)) as engine:
        run = _run_uploader(
            tier_for(engine.bucket),
            journal,
            tmp_path / "ckpt.bin",
            "ckpt.bin",
            "transfer.upload-created=kill",
        )
        assert run.returncode == -9, run.stderr
        [entry] = FileUploadJournal(journal).entries()
        assert entry.upload_id is None  # only the intent was recorded; the upload exists on the gateway
        [result] = engine.upload_files([UploadItem(str(tmp_path / "ckpt.bin"), "ckpt.bin")])
        assert result.xxh3_128 == xxhash.xxh3_128_hexdigest(data)
        assert engine.client.list_multipart_uploads(Bucket=engine.bucket).get("Uploads", []) == []


def test_gateway_restart_mid_upload_is_ridden_out(tmp_path: Path) -> None:
    """The gateway dies after part 2; part 3 meets a refused connection; the gateway comes back and
    the same run completes. Ordered by fault points (pause), not by sleeps."""
    data = write_random(tmp_path / "ckpt.bin", 20 * MiB, seed=9)
    journal = tmp_path / "uploads.json"
    gw = PrivateGateway(tmp_path)
    gw.start()
    events = tmp_path / "events"
    events.mkdir()
    try:
        with fresh_bucket(SMALL_PARTS) as engine:
            tier = tier_for(engine.bucket, endpoint=gw.endpoint)
            faults = "transfer.part-sent@2=pause,transfer.retry=pause"
            proc = subprocess.Popen(
                _uploader_args(tier, journal, tmp_path / "ckpt.bin", "ckpt.bin"),
                env=_env(faults, STOREKIT_FAULT_DIR=str(events)),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                wait_for("part 2 sent", (events / "transfer.part-sent.reached").exists)
                gw.stop()
                (events / "transfer.part-sent.go").touch()
                wait_for("a refused request to be retried", (events / "transfer.retry.reached").exists)
                gw.start()
                (events / "transfer.retry.go").touch()
                out, err = proc.communicate(timeout=300)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            assert proc.returncode == 0, err
            assert json.loads(out) == {"xxh3": xxhash.xxh3_128_hexdigest(data), "parts": 4}
            got = engine.client.get_object(Bucket=engine.bucket, Key="ckpt.bin")["Body"].read()
            assert got == data
            assert FileUploadJournal(journal).entries() == []
    finally:
        gw.stop()


# -- deletes that cannot lie, and the archive bucket's precondition ---------------------------------
def test_delete_checks_every_key_and_lists_again(tmp_path: Path) -> None:
    with fresh_bucket(SMALL_PARTS) as engine:
        for k in ("run/a", "run/b", "run/sub/c", "other/d"):
            engine.client.put_object(Bucket=engine.bucket, Key=k, Body=k.encode())
        delete_keys(engine, ["run/a", "run/sub/c"])
        assert keys(engine) == ["other/d", "run/b"]
        assert delete_prefix(engine, "run") == 1
        assert keys(engine) == ["other/d"]
        with pytest.raises(StorekitError, match="refusing to delete everything"):
            delete_prefix(engine, "/")


def test_a_delete_the_gateway_refuses_for_one_key_is_reported(tmp_path: Path) -> None:
    with fresh_bucket(SMALL_PARTS) as engine:
        for k in ("run/free-1", "run/locked/x", "run/free-2"):
            engine.client.put_object(Bucket=engine.bucket, Key=k, Body=b"x")
        policy = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "s3:DeleteObject",
                    "Resource": f"arn:aws:s3:::{engine.bucket}/run/locked/*",
                }
            ],
        }
        engine.client.put_bucket_policy(Bucket=engine.bucket, Policy=json.dumps(policy))
        with pytest.raises(DeleteFailed) as info:
            delete_keys(engine, ["run/free-1", "run/locked/x", "run/free-2"])
        assert info.value.failed == {"run/locked/x": "AccessDenied"}
        assert "run/locked/x: not deleted (AccessDenied); 1 of 3 objects remain" in str(info.value)
        assert keys(engine) == ["run/locked/x"]  # the others are gone, the refused one is still there


def test_versioned_archive_bucket_is_refused() -> None:
    with fresh_bucket(SMALL_PARTS) as engine:
        check_unversioned(engine)  # a fresh bucket never had versioning
        engine.client.put_bucket_versioning(
            Bucket=engine.bucket, VersioningConfiguration={"Status": "Enabled"}
        )
        with pytest.raises(StorekitError, match=f"bucket {engine.bucket} at .* has versioning Enabled"):
            check_unversioned(engine)
        engine.client.put_bucket_versioning(
            Bucket=engine.bucket, VersioningConfiguration={"Status": "Suspended"}
        )
        with pytest.raises(StorekitError, match="has versioning Suspended"):
            check_unversioned(engine)
