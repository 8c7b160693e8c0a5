"""S3 I/O for the workers (Ceph RGW or any S3 endpoint) through storekit's one botocore client.

Big objects go up as multipart uploads (parts of max(block size, 8 MiB)), small ones as one PUT;
GETs stream the whole object in block-size reads; training windows are ranged GETs from a thread per
queue slot (botocore releases the GIL on the socket). Latency is per request, retries included
(store.retry's rule with the store's short budget, as every storekit request).
"""

from __future__ import annotations

import contextlib
import errno
import os
from typing import Any

from storekit.bench.plan import WorkerTask
from storekit.bench.recorder import Job, Recorder, run_recorded_threads
from storekit.bench.spec import TargetSpec
from storekit.store.retry import STORE_RETRY, call_with_retries
from storekit.store.s3client import s3_client
from storekit.store.s3client import warm_up as warm_up  # the forkserver's preload (engine_s3_warm)

MIN_PART = 8 * 1024 * 1024


def make_client(target: TargetSpec, pool: int = 10) -> Any:
    """The store's client (store.s3client: RGW-safe config, the session loaded once per process and
    inherited by forked workers); credentials from the tier or the environment."""
    opts: dict[str, Any] = dict(target.s3_options)
    client_kwargs = dict(opts.get("client_kwargs") or {})
    client_kwargs.setdefault("region_name", os.environ.get("AWS_DEFAULT_REGION") or "us-east-1")
    opts["client_kwargs"] = client_kwargs
    if target.endpoint_url:
        opts["endpoint_url"] = target.endpoint_url
    return _Retrying(s3_client(opts, max_pool=max(pool, 10)))


class _Retrying:
    """A client whose every call goes through the one retry rule (store.retry)."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)
        if not callable(method):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            return call_with_retries(lambda: method(*args, **kwargs), policy=STORE_RETRY)

        return call


class S3Failure(OSError):
    """A failed request, naming the key; the coordinator reports it in one line."""


def _fail(key: str, exc: BaseException) -> S3Failure:
    code = getattr(exc, "response", {}).get("Error", {}).get("Code", type(exc).__name__)
    return S3Failure(errno.EIO, f"s3 {key}: {code}")


class _Base:
    engine = "boto3"
    direct: bool | None = None

    def __init__(self, task: WorkerTask, pool: int = 10) -> None:
        self.task = task
        self.notes: list[str] = []
        self.client = make_client(task.target, pool)
        self.bucket = task.target.bucket
        self.keys = [f"{task.run_root}/{f}" for f in task.files]

    def close(self) -> None:
        self.client.close()


class Put(_Base):
    def __init__(self, task: WorkerTask) -> None:
        super().__init__(task)
        self.part = max(task.block_size, MIN_PART)
        self.body = os.urandom(min(self.part, task.file_size))

    def run(self, rec: Recorder) -> None:
        for key in self.keys:
            try:
                if self.task.file_size <= self.part:
                    t0 = rec.now()
                    self.client.put_object(Bucket=self.bucket, Key=key, Body=self.body[: self.task.file_size])
                    rec.op(t0, rec.now(), self.task.file_size)
                else:
                    self._multipart(key, rec)
            except S3Failure:
                raise
            except Exception as exc:
                raise _fail(key, exc) from None

    def _multipart(self, key: str, rec: Recorder) -> None:
        upload = self.client.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"]
        try:
            parts = []
            for number, offset in enumerate(range(0, self.task.file_size, self.part), start=1):
                size = min(self.part, self.task.file_size - offset)
                t0 = rec.now()
                reply = self.client.upload_part(
                    Bucket=self.bucket, Key=key, UploadId=upload, PartNumber=number, Body=self.body[:size]
                )
                rec.op(t0, rec.now(), size)
                parts.append({"PartNumber": number, "ETag": reply["ETag"]})
            self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts}
            )
        except BaseException:
            # the coordinator also aborts leftovers under the run prefix
            with contextlib.suppress(Exception):
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload)
            raise


class Get(_Base):
    def run(self, rec: Recorder) -> None:
        bs = self.task.block_size
        for key in self.keys:
            try:
                t0 = rec.now()
                body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
                got = 0
                while chunk := body.read(bs):
                    got += len(chunk)
                    rec.trace.add(rec.now() + rec.wall_offset, len(chunk), 0)
                t1 = rec.now()
            except Exception as exc:
                raise _fail(key, exc) from None
            if got != self.task.file_size:
                raise S3Failure(errno.EIO, f"s3 {key}: got {got} bytes, expected {self.task.file_size}")
            rec.latency.record(t1 - t0)
            rec.trace.add(t1 + rec.wall_offset, 0, 1)
            rec.bytes += got
            rec.ops += 1


class RangedGet(_Base):
    """Random training windows as ranged GETs, one thread per queue slot."""

    engine = "boto3-threads"

    def __init__(self, task: WorkerTask) -> None:
        super().__init__(task, pool=task.queue_depth)
        self.windows = task.file_size // task.window

    def run(self, rec: Recorder) -> None:
        import numpy as np

        deadline = rec.now() + int(self.task.duration * 1e9)
        window = self.task.window

        def body(slot: int, r: Recorder) -> None:
            rng = np.random.default_rng((self.task.seed, slot))
            first = True  # every slot completes one request, however short the phase or slow the start
            while first or r.now() < deadline:
                first = False
                key = self.keys[int(rng.integers(len(self.keys)))]
                start = int(rng.integers(self.windows)) * window
                t0 = r.now()
                try:
                    reply = self.client.get_object(
                        Bucket=self.bucket, Key=key, Range=f"bytes={start}-{start + window - 1}"
                    )
                    data = reply["Body"].read()
                except Exception as exc:
                    raise _fail(key, exc) from None
                if len(data) != window:
                    raise S3Failure(errno.EIO, f"s3 {key}: ranged GET returned {len(data)} of {window} bytes")
                r.op(t0, r.now(), window)

        run_recorded_threads(self.task.queue_depth, body, rec)


class Meta(_Base):
    """Small objects: put, list, head, get, delete."""

    def __init__(self, task: WorkerTask) -> None:
        super().__init__(task)
        self.names = [f"{task.run_root}/{n}" for n in task.meta_names()]
        self.payload = os.urandom(task.file_size)

    def run(self, rec: Recorder) -> None:
        if self.task.op == "list":
            self._list(rec)
            return
        op = {"create": self._put, "stat": self._head, "readsmall": self._get, "delete": self._delete}[
            self.task.op
        ]
        for key in self.names:
            t0 = rec.now()
            try:
                nbytes = op(key)
            except S3Failure:
                raise
            except Exception as exc:
                raise _fail(key, exc) from None
            rec.op(t0, rec.now(), nbytes)

    def _put(self, key: str) -> int:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=self.payload)
        return len(self.payload)

    def _head(self, key: str) -> int:
        self.client.head_object(Bucket=self.bucket, Key=key)
        return 0

    def _get(self, key: str) -> int:
        data = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        if len(data) != len(self.payload):
            raise S3Failure(errno.EIO, f"s3 {key}: got {len(data)} bytes, expected {len(self.payload)}")
        return len(data)

    def _delete(self, key: str) -> int:
        self.client.delete_object(Bucket=self.bucket, Key=key)
        return 0

    def _list(self, rec: Recorder) -> None:
        """List the owner's objects page by page; ops are objects listed, latency is per page."""
        prefix = f"{self.task.run_root}/{self.task.meta_dir}/w{self.task.meta_owner:04d}."
        token: str | None = None
        seen = 0
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": 1000}
            if token:
                kwargs["ContinuationToken"] = token
            t0 = rec.now()
            try:
                page = self.client.list_objects_v2(**kwargs)
            except Exception as exc:
                raise _fail(prefix, exc) from None
            t1 = rec.now()
            count = len(page.get("Contents", []))
            rec.latency.record(t1 - t0)
            rec.trace.add(t1 + rec.wall_offset, 0, count)
            rec.ops += count
            seen += count
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                break
        if seen != self.task.meta_count:
            raise S3Failure(errno.EIO, f"s3 list {prefix}: {seen} objects, expected {self.task.meta_count}")


def prepare(task: WorkerTask) -> Job:
    kinds: dict[str, Any] = {"write": Put, "read": Get, "randread": RangedGet}
    job: Job = kinds[task.op](task) if task.op in kinds else Meta(task)
    return job
