"""The one S3 client storekit makes: botocore, configured for Ceph RGW, retries left to store.retry.

Every S3 request goes through a client from `s3_client`: the store (S3Store), the transfer engine
(ops.s3transfer) and the benchmark workers (bench.engine_s3). botocore's session rather than boto3's:
boto3 adds nothing a client needs and ~60 ms of imports (s3transfer, resources) to every command.
A fresh botocore session per client (credentials are looked up anew: a rotated key in the
environment is seen), sharing one model loader per process (loading the S3 service model costs
~100 ms once; a further client then costs a few ms).
"""

from __future__ import annotations

import contextlib
import gc
import socket
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from storekit.errors import ConfigError

# Ceph RGW (Pacific) rejects the aws-chunked CRC trailers newer botocore sends by default, and a
# dead endpoint should fail in seconds, not minutes. botocore's retries are off: store.retry's
# time budget is the one rule (a caller's config_kwargs cannot switch them back on).
S3_CONFIG: dict[str, Any] = {
    "s3": {"addressing_style": "path"},
    "request_checksum_calculation": "when_required",
    "response_checksum_validation": "when_required",
    "connect_timeout": 5,
    "read_timeout": 120,
}
_NO_RETRIES = {"total_max_attempts": 1, "mode": "standard"}
# a tier's options (config.toml [tiers.X.options], config.S3_OPTIONS: these four, client_kwargs
# for create_client and config_kwargs for botocore's Config) -> botocore's create_client arguments
_CLIENT_ARGS = {
    "endpoint_url": "endpoint_url",
    "key": "aws_access_key_id",
    "secret": "aws_secret_access_key",
    "token": "aws_session_token",
}

_LOADER: Any = None
_BUILT = False  # the first client was made (_first_build)
_LOCK = threading.Lock()


def _session() -> Any:
    """A new botocore session on the process's one data loader (which caches the loaded models)."""
    import botocore.session

    global _LOADER
    session = botocore.session.get_session()
    if _LOADER is None:
        _LOADER = session.get_component("data_loader")
    else:
        session.register_component("data_loader", _LOADER)
    return session


@contextlib.contextmanager
def _first_build() -> Iterator[None]:
    """The first client of a process builds ~10^5 long-lived objects (botocore's modules, the S3
    service model, its endpoint rules). The cyclic collector, triggered every 700 allocations,
    walks them again and again while they are made: a third of the build's CPU, measured
    (benchmarks/RESULTS.md, #36). Paused while they are made, then frozen (gc.freeze): they live as
    long as the process, and the collections a transfer triggers no longer walk them."""
    global _BUILT
    if _BUILT:
        yield
        return
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        _BUILT = True
        gc.freeze()
    finally:
        if was_enabled:
            gc.enable()


def s3_client(options: Mapping[str, Any], *, max_pool: int = 10, sign_payload: bool | None = None) -> Any:
    """A botocore S3 client from a tier's options (endpoint_url, key, secret, token, client_kwargs,
    config_kwargs, profile); credentials not given there come from botocore's usual chain. `sign_payload`:
    None is botocore's own choice (signed over plain http)."""
    opts = dict(options)
    conf = {**S3_CONFIG, **opts.get("config_kwargs", {})}
    if sign_payload is not None:
        conf["s3"] = {**conf.get("s3", {}), "payload_signing_enabled": sign_payload}
    conf["retries"] = _NO_RETRIES
    conf["max_pool_connections"] = max_pool
    kwargs: dict[str, Any] = dict(opts.get("client_kwargs", {}))
    for ours, theirs in _CLIENT_ARGS.items():
        if opts.get(ours):
            kwargs[theirs] = opts[ours]
    with _LOCK, _first_build():  # botocore's sessions and loader are not thread-safe; its clients are
        import botocore.config
        import botocore.exceptions

        session = _session()
        if opts.get("profile"):  # a named profile of ~/.aws/credentials or ~/.aws/config
            session.set_config_variable("profile", opts["profile"])
        try:
            client = session.create_client("s3", config=botocore.config.Config(**conf), **kwargs)
        except botocore.exceptions.ProfileNotFound:
            where = (
                "$AWS_SHARED_CREDENTIALS_FILE / $AWS_CONFIG_FILE (default ~/.aws/credentials, ~/.aws/config)"
            )
            raise ConfigError(
                "s3 tier options", "profile", f"no profile {opts['profile']!r} in {where}"
            ) from None
        _ack_response_headers_at_once(client)  # under the lock: the pool classes are made once
    return client


def warm_up() -> None:
    """Load botocore and the S3 service model now (the bench's forkserver does, before forking)."""
    with _LOCK, _first_build():
        client = _session().create_client("s3", region_name="us-east-1", endpoint_url="http://localhost:1")
    client.close()


def _ack_response_headers_at_once(client: Any) -> None:
    """Make the client's connections acknowledge a response's headers as soon as they are read.

    A gateway that writes the headers and the body of a response in two writes with Nagle on (Ceph
    RGW's beast frontend does) holds the body back until the headers are acknowledged, and Linux
    delays that ACK up to 40 ms on a connection that just sent a request: every small GET, listing
    page or CompleteMultipartUpload then took ~44 ms instead of ~2. TCP_QUICKACK set after the headers
    sends the pending ACK at once. Where the platform has no TCP_QUICKACK nothing changes."""
    if _QUICKACK is None:
        return
    http_session = getattr(getattr(client, "_endpoint", None), "http_session", None)
    pools = getattr(http_session, "_pool_classes_by_scheme", None)
    manager = getattr(http_session, "_manager", None)
    if not isinstance(pools, dict) or manager is None:
        return  # a botocore whose session is shaped otherwise: its own behaviour
    pools.update(_quickack_pools())
    manager.pool_classes_by_scheme = pools


_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)
_POOLS: dict[str, Any] = {}


def _quickack_pools() -> dict[str, Any]:
    """{"http": pool class, "https": pool class} whose connections ACK response headers at once."""
    if not _POOLS:
        import botocore.awsrequest as aws

        def ack_at_once(base: Any) -> Any:
            class Connection(base):  # type: ignore[misc]
                def getresponse(self, *args: Any, **kwargs: Any) -> Any:
                    response = super().getresponse(*args, **kwargs)
                    sock = getattr(self, "sock", None)
                    if sock is not None:
                        # a closed or non-TCP socket: nothing to acknowledge
                        with contextlib.suppress(OSError):
                            sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
                    return response

            Connection.__name__ = Connection.__qualname__ = f"QuickAck{base.__name__}"
            return Connection

        for scheme, pool in (("http", aws.AWSHTTPConnectionPool), ("https", aws.AWSHTTPSConnectionPool)):
            _POOLS[scheme] = type(
                f"QuickAck{pool.__name__}", (pool,), {"ConnectionCls": ack_at_once(pool.ConnectionCls)}
            )
    return _POOLS
