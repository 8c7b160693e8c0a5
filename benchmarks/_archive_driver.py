"""One contender of bench_archive.py in its own process, so its CPU time is measured alone.

  _archive_driver.py storekit-up   SRC PREFIX SIGN DIGESTS_OUT   storekit's engine, xxh3 in the read pass
  _archive_driver.py boto3-up      SRC PREFIX SIGN               boto3's transfer manager, no verification
  _archive_driver.py storekit-down PREFIX DST SIGN DIGESTS       ranged GETs, xxh3 checked, fsync per file

The endpoint, bucket and keys come from the environment (BENCH_S3_ENDPOINT, BENCH_BUCKET,
BENCH_S3_KEY, BENCH_S3_SECRET), never from the command line.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

MiB = 1024 * 1024
THREADS = 8
PART = 64 * MiB


def files_under(src: str) -> list[tuple[str, str]]:
    out = []
    for root, _, names in os.walk(src):
        for name in sorted(names):
            path = os.path.join(root, name)
            out.append((path, os.path.relpath(path, src)))
    return sorted(out)


def tier_options() -> dict[str, str]:
    return {
        "endpoint_url": os.environ["BENCH_S3_ENDPOINT"],
        "key": os.environ["BENCH_S3_KEY"],
        "secret": os.environ["BENCH_S3_SECRET"],
    }


def storekit_engine(sign: bool):  # type: ignore[no-untyped-def]
    from storekit.config import TierConfig
    from storekit.ops.s3transfer import S3Transfer, TransferConfig

    tier = TierConfig(name="bench", url=f"s3://{os.environ['BENCH_BUCKET']}", options=tier_options())
    return S3Transfer.for_tier(tier, config=TransferConfig(threads=THREADS, sign_payload=sign))


def storekit_up(src: str, prefix: str, sign: bool, digests_out: str) -> None:
    from storekit.ops.s3transfer import UploadItem

    with storekit_engine(sign) as engine:
        results = engine.upload_files([UploadItem(p, f"{prefix}/{rel}") for p, rel in files_under(src)])
    Path(digests_out).write_text(json.dumps({r.key: r.xxh3_128 for r in results}))
    print(json.dumps({"bytes": sum(r.size for r in results), "files": len(results)}))


def storekit_down(prefix: str, dst: str, sign: bool, digests: str) -> None:
    from storekit.ops.s3transfer import DownloadItem

    expected: dict[str, str] = json.loads(Path(digests).read_text())
    items = []
    for key, digest in sorted(expected.items()):
        path = os.path.join(dst, key[len(prefix) + 1 :])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        items.append(DownloadItem(key, path, digest))
    with storekit_engine(sign) as engine:
        results = engine.download_files(items)
    print(json.dumps({"bytes": sum(r.size for r in results), "files": len(results)}))


def boto3_up(src: str, prefix: str, sign: bool) -> None:
    import boto3
    import botocore.config
    from boto3.s3.transfer import TransferConfig, create_transfer_manager

    config = botocore.config.Config(
        s3={"addressing_style": "path", "payload_signing_enabled": sign},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        max_pool_connections=THREADS + 2,
    )
    client = boto3.session.Session().client(
        "s3",
        endpoint_url=os.environ["BENCH_S3_ENDPOINT"],
        aws_access_key_id=os.environ["BENCH_S3_KEY"],
        aws_secret_access_key=os.environ["BENCH_S3_SECRET"],
        config=config,
    )
    tconf = TransferConfig(multipart_threshold=PART, multipart_chunksize=PART, max_concurrency=THREADS)
    total = 0
    bucket = os.environ["BENCH_BUCKET"]
    with create_transfer_manager(client, tconf) as manager:
        futures = []
        for path, rel in files_under(src):
            total += os.path.getsize(path)
            futures.append(manager.upload(path, bucket, f"{prefix}/{rel}"))
        for fut in futures:
            fut.result()
    print(json.dumps({"bytes": total, "files": len(futures)}))


def main() -> None:
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "storekit-up":
        storekit_up(args[0], args[1], args[2] == "on", args[3])
    elif mode == "storekit-down":
        storekit_down(args[0], args[1], args[2] == "on", args[3])
    elif mode == "boto3-up":
        boto3_up(args[0], args[1], args[2] == "on")
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
