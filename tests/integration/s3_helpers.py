"""Helpers for tests of the S3 transfer engine: a fresh bucket, a private radosgw, waiting on events."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from storekit.config import TierConfig
from storekit.ops.s3transfer import S3Transfer, TransferConfig
from storekit.store.s3delete import list_keys
from tests.conftest import _need, s3_options

MiB = 1024 * 1024
EVENT_DEADLINE_S = 120.0  # only a hung test ever reaches this: it bounds a wait, it orders nothing


def wait_for(what: str, done: Callable[[], bool]) -> None:
    """Block until `done()` holds (an event another process causes); fail after the deadline."""
    end = time.monotonic() + EVENT_DEADLINE_S
    while not done():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def tier_for(bucket: str, endpoint: str | None = None) -> TierConfig:
    options = dict(s3_options())
    if endpoint:
        options["endpoint_url"] = endpoint
    return TierConfig(name="archive", url=f"s3://{bucket}", role="archive", options=options)


@contextmanager
def fresh_bucket(config: TransferConfig | None = None, **kwargs: Any) -> Iterator[S3Transfer]:
    """An engine on a new bucket of the shared gateway; the bucket goes afterwards (uploads aborted)."""
    bucket = f"sk-xfer-{uuid.uuid4().hex[:12]}"
    engine = S3Transfer.for_tier(tier_for(bucket), config=config, **kwargs)
    engine.client.create_bucket(Bucket=bucket)
    try:
        yield engine
    finally:
        remove_bucket(engine.client, bucket)
        engine.close()


def remove_bucket(client: Any, bucket: str) -> None:
    try:
        client.delete_bucket_policy(Bucket=bucket)
        for up in client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
            client.abort_multipart_upload(Bucket=bucket, Key=up["Key"], UploadId=up["UploadId"])
        versions = client.list_object_versions(Bucket=bucket)
        for v in versions.get("Versions", []) + versions.get("DeleteMarkers", []):
            client.delete_object(Bucket=bucket, Key=v["Key"], VersionId=v["VersionId"])
        client.delete_bucket(Bucket=bucket)
    except Exception as exc:  # cleanup must not hide the test's own result
        print(f"warning: could not remove bucket {bucket}: {exc}")


def keys(engine: S3Transfer, prefix: str = "") -> list[str]:
    return sorted(list_keys(engine, prefix))


def write_random(path: Path, size: int, seed: int = 0) -> bytes:
    data = random.Random(seed).randbytes(size)
    path.write_bytes(data)
    return data


class PrivateGateway:
    """A second radosgw of the test cluster on its own port, so a test can stop and restart it
    without disturbing the shared gateway (same cluster, same users and buckets)."""

    def __init__(self, workdir: Path) -> None:
        conf = os.environ.get("CEPH_CONF")
        if not conf or not os.path.exists(conf) or not shutil.which("radosgw"):
            _need("CEPH_CONF of the test cluster and radosgw, for a private gateway")
        self.conf = str(conf)
        self.workdir = workdir
        self.name = f"client.rgw.sktest{os.getpid()}{uuid.uuid4().hex[:6]}"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        # the shared gateway's [client.rgw] settings, given on the command line for our own name
        self.proc = subprocess.Popen(
            [
                "radosgw", "-f", "-c", self.conf, "-n", self.name,
                "--rgw-frontends", f"beast endpoint=127.0.0.1:{self.port}",
                "--ms-mon-client-mode", "crc", "--auth-client-required", "none",
                "--admin-socket", str(self.workdir / "rgw.asok"),
                "--log-file", str(self.workdir / "rgw.log"),
                "--rgw-data", str(self.workdir),
                "--rgw-thread-pool-size", "16",
            ],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        wait_for(f"radosgw on {self.endpoint}", self._answers)

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"private radosgw exited with {self.proc.returncode}")
        try:
            urllib.request.urlopen(self.endpoint, timeout=1).close()
        except OSError:
            return False
        return True

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
