"""One S3 client stack: every S3 request (store, transfer engine, bench workers) on store.s3client's
botocore client, under store.retry's one retry rule."""

from __future__ import annotations

import gc
import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from storekit import faults
from storekit.config import TierConfig
from storekit.errors import ConfigError, UnreachableError
from storekit.store import S3Store, open_store
from storekit.store.retry import STORE_RETRY, RetryPolicy
from tests.conftest import storekit_env

# the S3 libraries storekit does not run on (boto3 is installed for its botocore only)
OTHER_STACKS = ["aiobotocore", "aiohttp", "boto3", "s3fs", "s3transfer"]


@pytest.mark.ceph
def test_store_engine_and_bench_run_on_botocore_alone(s3_tier: TierConfig, tmp_path: Path) -> None:
    """A fresh process that lists, reads, writes and deletes through the store, uploads and reads
    back through the transfer engine and makes a bench worker's client imports no other S3 stack."""
    script = textwrap.dedent(
        f"""
        import json, sys
        from storekit.bench.engine_s3 import make_client
        from storekit.bench.spec import TargetSpec
        from storekit.config import TierConfig
        from storekit.ops.s3transfer import S3Transfer, TransferConfig, UploadItem
        from storekit.ops.s3readback import readback_digest
        from storekit.store import open_store

        tier = TierConfig(**json.loads(sys.argv[1]))
        store = open_store(tier)
        store.write_bytes("d/one.bin", b"1" * 100, metadata={{"k": "v"}})
        with store.atomic_writer("d/two.bin") as fh:
            fh.write(b"2" * 200)
        seen = [e.path for e in store.walk("")], [e.path for e in store.glob("d/*.bin")]
        with store.open_read("d/two.bin", block_size=64) as fh:
            assert fh.read() == b"2" * 200
        assert store.read_bytes("d/one.bin") == b"1" * 100 and store.get_metadata("d/one.bin") == {{"k": "v"}}
        store.delete("d", recursive=True)
        with S3Transfer.for_tier(tier, config=TransferConfig(threads=1)) as engine:
            bucket_prefix = tier.url[5:].split("/", 1)[1]
            engine.upload_files([UploadItem(path=sys.argv[2], key=bucket_prefix + "/up.bin")])
            size, _ = readback_digest(engine, bucket_prefix + "/up.bin")
        target = TargetSpec(kind="s3", root=tier.url[5:], s3_options=tier.options)
        make_client(target).head_bucket(Bucket=target.bucket)
        other = sorted(m for m in {OTHER_STACKS!r} if m in sys.modules)
        print(json.dumps({{"seen": seen, "size": size, "other": other}}))
        """
    )
    src = tmp_path / "up.bin"
    src.write_bytes(b"u" * 1000)
    tier = {"name": s3_tier.name, "url": s3_tier.url, "role": s3_tier.role, "options": s3_tier.options}
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(tier), str(src)],
        env=storekit_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["seen"] == [["d", "d/one.bin", "d/two.bin"], ["d/one.bin", "d/two.bin"]]
    assert out["size"] == 1000
    assert out["other"] == []  # not s3fs/aiobotocore, not boto3's resources or transfer manager
    assert [e.path for e in open_store(s3_tier).list("")] == ["up.bin"]  # the store sees the engine's


def test_a_store_call_is_retried_by_the_one_rule_not_by_botocore() -> None:
    """A refused connection: botocore tries once per call (its retries are off), storekit's retry rule
    tries again until the store's budget is spent, then the store says exit 5 naming the tier."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])  # bound, never listening: every connect is refused
        options = {"endpoint_url": f"http://127.0.0.1:{port}", "key": "k", "secret": "s"}
        store = open_store(TierConfig(name="vault", url="s3://bucket/p", options=options))
        assert isinstance(store, S3Store) and store.retry is STORE_RETRY
        assert store.client.meta.config.retries == {"total_max_attempts": 1, "mode": "standard"}
        store.retry = RetryPolicy(budget_s=0.2, first_delay_s=0.01, max_delay_s=0.01)
        retries: list[int] = []
        with faults.at("transfer.retry", lambda: retries.append(1)), pytest.raises(UnreachableError) as exc:
            store.info("x")
    assert exc.value.exit_code == 5
    assert str(exc.value).startswith(f"tier vault: cannot reach http://127.0.0.1:{port} for s3://bucket/p")
    assert len(retries) >= 2  # the same request sent again by store.retry, more than once


@pytest.mark.ceph
def test_a_writer_dropped_unclosed_leaves_nothing(s3_store: S3Store) -> None:
    """A writer garbage-collected without close() or abort() (a caller's bug) does not commit:
    IOBase's __del__ closes, and closing is what makes an object appear."""
    from storekit.store.s3 import _ObjectWriter

    s3_store.block_size = 5 << 20  # S3's smallest part: the second write starts a multipart upload
    fh = _ObjectWriter(s3_store, "dropped.bin", s3_store._key("dropped.bin"), {})
    fh.write(b"x" * (5 << 20))
    fh.write(b"tail")
    assert fh.upload_id is not None
    del fh
    gc.collect()
    assert not s3_store.exists("dropped.bin")
    assert not s3_store.client.list_multipart_uploads(Bucket=s3_store.bucket).get("Uploads")


@pytest.mark.ceph
def test_a_tier_can_name_an_aws_profile(
    s3_tier: TierConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`profile = "rgw"` in a tier's options takes its keys from that profile of the credentials
    file (as s3fs's option did); a profile that is not there is one config error naming it."""
    creds = tmp_path / "credentials"
    key, secret = s3_tier.options["key"], s3_tier.options["secret"]
    creds.write_text(f"[rgw]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    by_profile = {"endpoint_url": s3_tier.options["endpoint_url"], "profile": "rgw"}
    store = open_store(TierConfig(name="archive", url=s3_tier.url, role="archive", options=by_profile))
    store.write_bytes("p.bin", b"profile")
    assert open_store(s3_tier).read_bytes("p.bin") == b"profile"
    missing = {**by_profile, "profile": "nope"}
    with pytest.raises(ConfigError, match="profile: no profile 'nope'"):
        open_store(TierConfig(name="archive", url=s3_tier.url, role="archive", options=missing)).read_bytes(
            "p.bin"
        )


@pytest.mark.ceph
@pytest.mark.skipif(not hasattr(socket, "TCP_QUICKACK"), reason="TCP_QUICKACK is Linux's")
def test_a_response_is_acknowledged_as_soon_as_its_headers_are_read(s3_tier: TierConfig) -> None:
    """RGW writes a response's headers and body separately with Nagle on: the body waits for the ACK
    of the headers, which Linux delays up to 40 ms on a connection that just sent its request (every
    small GET and listing page took ~44 ms instead of ~2, benchmarks/RESULTS.md). storekit's client
    turns TCP_QUICKACK on once the headers are read, on every connection, over keep-alive reuse."""
    from storekit.store.s3client import s3_client

    client = s3_client(s3_tier.options, max_pool=1)
    bucket, prefix = s3_tier.url[len("s3://") :].split("/", 1)
    body = b"small object " * 300
    client.put_object(Bucket=bucket, Key=f"{prefix}/small", Body=body)
    for _ in range(3):  # the same pooled connection each time
        response = client.get_object(Bucket=bucket, Key=f"{prefix}/small")
        connection = response["Body"]._raw_stream.connection
        assert type(connection).__name__.startswith("QuickAck")
        assert connection.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK) == 1
        assert response["Body"].read() == body
    listing = client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/")
    assert f"{prefix}/small" in [o["Key"] for o in listing["Contents"]]


FIRST_BUILD = """
import gc, json, sys
from storekit.errors import ConfigError
from storekit.store.s3client import s3_client

starts = []
gc.callbacks.append(lambda phase, info: starts.append(info["generation"]) if phase == "start" else None)
if sys.argv[1] == "fails-first":
    try:
        s3_client({"endpoint_url": "http://127.0.0.1:1", "profile": "no-such-profile"})
    except ConfigError:
        pass
    after_failure = {"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}
else:
    after_failure = None
starts.clear()
client = s3_client({"endpoint_url": "http://127.0.0.1:1", "key": "k", "secret": "s"})
model = client.meta.service_model._service_description
print(json.dumps({
    "collections": len(starts),
    "enabled": gc.isenabled(),
    "frozen": gc.get_freeze_count(),
    "model_frozen": not any(o is model for o in gc.get_objects()),
    "after_failure": after_failure,
}))
"""


@pytest.mark.parametrize("first", ["builds", "fails-first"])
def test_the_first_client_is_built_without_the_collector_and_then_frozen(first: str, tmp_path: Path) -> None:
    """botocore's modules and the S3 model (~10^5 objects) are made with the cyclic collector
    paused and then frozen, so neither the build nor a transfer's collections nor the exit walk
    them; the collector runs again afterwards, also after a first build that failed."""
    env = storekit_env(
        {"AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}
    )
    out = subprocess.run(
        [sys.executable, "-c", FIRST_BUILD, first], env=env, capture_output=True, text=True, check=True
    )
    got = json.loads(out.stdout)
    assert got["collections"] == 0  # none ran while botocore was imported and the client built
    assert got["enabled"] is True
    assert got["frozen"] > 10_000 and got["model_frozen"] is True
    if first == "fails-first":
        assert got["after_failure"] == {"enabled": True, "frozen": 0}  # nothing frozen by a failed build
