"""storekit's S3 client vs a bare boto3 client, request by request, on the same gateway.

  python benchmarks/bench_s3_requests.py [--requests 40] [--repeat 5]

A tier's small requests (a manifest or stub GET, a listing page, a HEAD, a CompleteMultipartUpload,
a small file's PUT) each cost a round trip or two: with a Ceph RGW (beast) that writes a response's
headers and body in two writes, the body waits for the client's delayed ACK of the headers (~40 ms
on Linux) unless the client acknowledges them at once, as storekit's client does (store/s3client.py).
Both clients make the same requests on one bucket, one connection each, order alternating per round;
the figures are milliseconds per request (median of rounds) and boto3 / storekit ratios (> 1: storekit
faster). The endpoint and keys come from STOREKIT_TEST_S3_ENDPOINT/_KEY/_SECRET (scripts/services/
ceph-up.sh's s3.env). Holds /tmp/storekit-bench.lock while timing.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SIZES = {"GET 4 KiB": 4096, "GET 700 KiB": 700 * 1024, "GET 16 MiB range": 16 << 20}


def clients() -> dict[str, Any]:
    import boto3
    import botocore.config

    from storekit.store.s3client import s3_client

    options = {
        "endpoint_url": os.environ["STOREKIT_TEST_S3_ENDPOINT"],
        "key": os.environ["STOREKIT_TEST_S3_KEY"],
        "secret": os.environ["STOREKIT_TEST_S3_SECRET"],
    }
    bare = boto3.session.Session().client(
        "s3",
        endpoint_url=options["endpoint_url"],
        aws_access_key_id=options["key"],
        aws_secret_access_key=options["secret"],
        config=botocore.config.Config(
            s3={"addressing_style": "path"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            max_pool_connections=1,
        ),
    )
    return {"storekit": s3_client(options, max_pool=1), "boto3": bare}


def operations(client: Any, bucket: str) -> dict[str, Callable[[], object]]:
    def get(key: str, rng: str | None = None) -> Callable[[], object]:
        extra = {"Range": rng} if rng else {}
        return lambda: client.get_object(Bucket=bucket, Key=key, **extra)["Body"].read()

    return {
        "GET 4 KiB": get("GET 4 KiB"),
        "GET 700 KiB": get("GET 700 KiB"),
        "GET 16 MiB range": get("GET 16 MiB range", "bytes=0-16777215"),
        "HEAD": lambda: client.head_object(Bucket=bucket, Key="GET 4 KiB"),
        "LIST (5 keys)": lambda: client.list_objects_v2(Bucket=bucket),
        "PUT 4 KiB": lambda: client.put_object(Bucket=bucket, Key="put", Body=b"p" * 4096),
    }


def per_request_ms(fn: Callable[[], object], n: int) -> float:
    fn()  # the connection is open and warm before timing
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=40, help="requests per operation per round")
    ap.add_argument("--repeat", type=int, default=5, help="rounds, order alternating")
    args = ap.parse_args()
    made = clients()
    bucket = f"sk-bench-requests-{uuid.uuid4().hex[:8]}"
    setup = made["boto3"]
    setup.create_bucket(Bucket=bucket)
    try:
        for key, size in SIZES.items():
            setup.put_object(Bucket=bucket, Key=key, Body=os.urandom(size))
        ops = {who: operations(c, bucket) for who, c in made.items()}
        ms: dict[tuple[str, str], list[float]] = {}
        with open("/tmp/storekit-bench.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for rnd in range(args.repeat):
                order = ["storekit", "boto3"] if rnd % 2 == 0 else ["boto3", "storekit"]
                for name in ops["storekit"]:
                    for who in order:
                        ms.setdefault((name, who), []).append(per_request_ms(ops[who][name], args.requests))
        print(f"{args.requests} requests per operation and round, {args.repeat} rounds, one connection each")
        print("| request | storekit ms | boto3 ms | boto3 / storekit |")
        print("| --- | ---: | ---: | ---: |")
        for name in ops["storekit"]:
            ours, theirs = (statistics.median(ms[(name, w)]) for w in ("storekit", "boto3"))
            print(f"| {name} | {ours:.1f} | {theirs:.1f} | {theirs / ours:.2f} |")
    finally:
        listed = setup.list_objects_v2(Bucket=bucket).get("Contents", [])
        for obj in listed:
            setup.delete_object(Bucket=bucket, Key=obj["Key"])
        setup.delete_bucket(Bucket=bucket)


if __name__ == "__main__":
    main()
