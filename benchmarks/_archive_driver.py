"""One contender of bench_archive.py in its own process, so its CPU time is measured alone.

  _archive_driver.py storekit-upload ROOT UNIT PREFIX SIGN JOURNAL  the tier's S3 engine + upload journal
                                                                    (xxh3 in the read pass, no read-back)
  _archive_driver.py boto3-up      SRC PREFIX SIGN                  boto3's transfer manager, no verification
  _archive_driver.py storekit-archive ROOT UNIT PREFIX SIGN JOURNAL storekit.tier.mover.archive_unit: copy,
                                                                    read back every byte, commit, stub, free
  _archive_driver.py storekit-recall  ROOT UNIT PREFIX SIGN JOURNAL storekit.tier.mover.recall_unit
  _archive_driver.py storekit-drain   ROOT UNIT DST_ROOT JOURNAL    storekit.tier.mover.drain_unit (POSIX)

archive/recall/drain are the calls `storekit tier --apply` makes for each unit (storekit.tier.moveunit),
with the tier's default transfer settings except payload signing, which SIGN sets (on/off) for every
contender alike (`storekit tier` itself sends UNSIGNED-PAYLOAD). The endpoint, bucket and keys come from
the environment (BENCH_S3_ENDPOINT, BENCH_BUCKET, BENCH_S3_KEY, BENCH_S3_SECRET), never from argv.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

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


def s3_tier(prefix: str) -> Any:
    from storekit.config import TierConfig

    url = f"s3://{os.environ['BENCH_BUCKET']}/{prefix}"
    return TierConfig(name="archive", url=url, role="archive", options=tier_options())


def transfer(sign: bool) -> Any:
    from storekit.ops.s3transfer import TransferConfig

    return TransferConfig(sign_payload=sign)  # `storekit tier` itself: off (tier.dest.ARCHIVE_TRANSFER)


def storekit_upload(root: str, unit: str, prefix: str, sign: bool, journal: str) -> dict[str, Any]:
    from storekit.ops.journal import FileUploadJournal
    from storekit.ops.s3transfer import UploadItem
    from storekit.store import S3Store, open_store
    from storekit.tier.dest import S3Destination

    store = open_store(s3_tier(prefix))
    assert isinstance(store, S3Store)
    dest = S3Destination(
        store,
        unit,
        journal=FileUploadJournal(Path(journal) / "uploads.json"),
        config=transfer(sign),
    )
    try:
        src = os.path.join(root, unit)
        items = [UploadItem(p, dest.key(rel)) for p, rel in files_under(src)]
        results = dest.engine.upload_files(items)
    finally:
        dest.close()
    return {"bytes": sum(r.size for r in results), "files": len(results)}


def storekit_archive(root: str, unit: str, prefix: str, sign: bool, journal: str) -> dict[str, Any]:
    from storekit.tier.mover import archive_unit

    r = archive_unit(Path(root), unit, s3_tier(prefix), journal_dir=Path(journal), transfer=transfer(sign))
    if not r.freed:
        raise SystemExit(f"archive did not free the source: {r}")
    return r.to_dict()


def storekit_recall(root: str, unit: str, prefix: str, sign: bool, journal: str) -> dict[str, Any]:
    from storekit.config import SiteConfig
    from storekit.tier.mover import recall_unit

    site = SiteConfig(source="bench", tiers={"archive": s3_tier(prefix)}, default_tier="archive")
    r = recall_unit(Path(root), unit, journal_dir=Path(journal), site=site, transfer=transfer(sign))
    return r.to_dict()


def storekit_drain(root: str, unit: str, dst_root: str, journal: str) -> dict[str, Any]:
    from storekit.config import TierConfig
    from storekit.tier.mover import drain_unit

    dst = TierConfig(name="parallel", url=Path(dst_root).as_uri(), role="parallel")
    r = drain_unit(Path(root), unit, dst, journal_dir=Path(journal))
    if not r.freed:
        raise SystemExit(f"drain did not free the source: {r}")
    return r.to_dict()


def boto3_up(src: str, prefix: str, sign: bool) -> dict[str, Any]:
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
    return {"bytes": total, "files": len(futures)}


def main(argv: list[str]) -> None:
    what, args = argv[0], argv[1:]
    if what == "boto3-up":
        out = boto3_up(args[0], args[1], args[2] == "on")
    elif what == "storekit-drain":
        out = storekit_drain(*args)
    else:
        root, unit, prefix, sign, journal = args
        run = {"storekit-upload": storekit_upload, "storekit-archive": storekit_archive,
               "storekit-recall": storekit_recall}[what]  # fmt: skip
        out = run(root, unit, prefix, sign == "on", journal)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
