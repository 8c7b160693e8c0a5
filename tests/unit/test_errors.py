"""The one translator from OS/s3fs/botocore failures to storekit errors, once per error class.

The failures are real where that is cheap (a real open(), a real refused connection through boto3);
gateway answers are botocore's own ClientError with the response shape the gateway sends.
"""

from __future__ import annotations

import errno
import http.client
import os
import socket
from pathlib import Path

import boto3
import botocore.config
import botocore.exceptions
import pytest
import urllib3.exceptions

from storekit.errors import (
    ExitCode,
    NoSpaceError,
    NotFoundError,
    PermissionDeniedError,
    StorekitError,
    UnreachableError,
    error_class,
    is_retryable,
    storage_error,
    storage_errors,
)


def _client_error(code: str, status: int) -> botocore.exceptions.ClientError:
    response = {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return botocore.exceptions.ClientError(response, "GetObject")


def _wrapped_by_s3fs(cause: BaseException, code: int) -> OSError:
    """What s3fs raises: an OSError whose cause is botocore's error."""
    err = OSError(code, str(cause))
    err.__cause__ = cause
    return err


def _refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again at once: nothing listens there


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_or_quota_is_no_space_exit_6(tmp_path: Path, code: int) -> None:
    err = storage_error(OSError(code, os.strerror(code)), str(tmp_path), hints={NoSpaceError: "free space"})
    assert isinstance(err, NoSpaceError) and err.exit_code == ExitCode.NO_SPACE and int(err.exit_code) == 6
    # EDQUOT names the quota where the file system says which one is full (CephFS: integration test)
    said = "no space left on device" if code == errno.ENOSPC else "disk quota exceeded"
    assert err.message == f"{tmp_path}: {said}" and err.hint == "free space"


def test_a_missing_file_a_missing_parent_and_a_missing_key_are_not_found(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"x")
    failures: list[BaseException] = []
    for path in (tmp_path / "missing", tmp_path / "file" / "below"):
        with pytest.raises(OSError) as caught, open(path, "rb"):
            pass
        failures.append(caught.value)
    failures.append(_wrapped_by_s3fs(_client_error("NoSuchKey", 404), errno.ENOENT))
    failures.append(_client_error("NoSuchBucket", 404))
    errors = [storage_error(f, "the place") for f in failures]
    assert all(isinstance(e, NotFoundError) and e.exit_code == 3 for e in errors)
    assert [e.message for e in errors if e] == [
        "the place does not exist",
        "the place: not a directory (or a parent is not)",
        "the place does not exist",
        "the place does not exist",
    ]


def test_permission_read_only_and_refused_credentials_are_permission_denied() -> None:
    failures = [
        PermissionError(errno.EACCES, "Permission denied"),
        OSError(errno.EROFS, "Read-only file system"),
        _client_error("AccessDenied", 403),
        _client_error("SignatureDoesNotMatch", 403),
        botocore.exceptions.NoCredentialsError(),
    ]
    errors = [storage_error(f, "t") for f in failures]
    assert all(type(e) is PermissionDeniedError and e.exit_code == ExitCode.ERROR for e in errors)
    assert [e.message for e in errors if e] == [
        "t: permission denied",
        "t: read-only file system",
        "t: AccessDenied",
        "t: SignatureDoesNotMatch",
        "t: no S3 credentials",
    ]


def test_a_refused_connection_a_timeout_and_a_busy_gateway_are_retryable_exit_5() -> None:
    client = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{_refused_port()}",
        aws_access_key_id="k",
        aws_secret_access_key="s",
        region_name="us-east-1",
        config=botocore.config.Config(retries={"max_attempts": 1}, connect_timeout=2),
    )
    with pytest.raises(botocore.exceptions.EndpointConnectionError) as refused:
        client.head_bucket(Bucket="b")
    failures = [
        refused.value,
        botocore.exceptions.ConnectTimeoutError(endpoint_url="http://gw"),  # an OSError subclass too
        botocore.exceptions.ReadTimeoutError(endpoint_url="http://gw"),
        TimeoutError(errno.ETIMEDOUT, "Connection timed out"),
        ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
        _wrapped_by_s3fs(_client_error("SlowDown", 503), errno.EBUSY),
        _client_error("ServiceUnavailable", 503),
        botocore.exceptions.ClientError({"ResponseMetadata": {"HTTPStatusCode": 503}}, "PutObject"),
        http.client.IncompleteRead(b"partial", 100),  # a body cut short
        urllib3.exceptions.ProtocolError("Connection aborted."),
    ]
    for failure in failures:
        assert is_retryable(failure), failure
        err = storage_error(failure, "s3://b/k")
        assert (
            isinstance(err, UnreachableError)
            and err.exit_code == ExitCode.RETRYABLE
            and int(err.exit_code) == 5
        )
        assert err.message == "cannot reach the storage for s3://b/k"


def test_other_os_errors_are_plain_errors_and_anything_else_is_left_alone() -> None:
    err = storage_error(OSError(errno.EIO, "Input/output error"), "/mnt/x")
    assert type(err) is StorekitError and err.message == "/mnt/x: input/output error"
    assert not is_retryable(OSError(errno.EIO, "Input/output error"))
    assert error_class(ValueError("a bug")) is None and storage_error(KeyError("k"), "x") is None
    with pytest.raises(ValueError, match="a bug"), storage_errors("x"):
        raise ValueError("a bug")  # a bug keeps its traceback


def test_storage_errors_translates_and_keeps_storekit_errors_as_they_are(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="does not exist") as caught, storage_errors(str(tmp_path)):
        os.rmdir(tmp_path / "nothing")
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    original = NoSpaceError("estimate too big")
    with pytest.raises(NoSpaceError) as kept, storage_errors("x"):
        raise original
    assert kept.value is original
