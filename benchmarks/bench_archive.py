#!/usr/bin/env python3
"""Archive to and recall from the Ceph S3 gateway: storekit's transfer engine vs bare boto3 and rclone.

Same ~3 GiB of checkpoint-like files (4 x 640 MiB shards, 6 x 64 MiB, 20 x 1 MiB, 10 small JSON
files), same gateway, same run, contenders alternating their order each round:

  upload    storekit   S3Transfer.upload_files, 8 threads, 64 MiB parts, xxh3-128 in the read pass
            boto3      boto3's transfer manager, 8 threads, 64 MiB parts, no verification
            rclone     rclone copy --checksum --transfers 8   (Debian rclone 1.60)
  download  storekit   S3Transfer.download_files, 8 threads, xxh3-128 of the written bytes checked
                       against the upload's digests, fsync per file
            rclone     rclone copy --transfers 8 back to a local directory

storekit and boto3 use the same payload-signing setting (--sign-payload on|off; on is botocore's
default over http: the SHA-256 of every body is sent and checked by the gateway).
Targets (issue #11): upload >= 0.9x bare boto3; download+verify >= 0.9x rclone's copy back.

Before timing, the OSD is warmed with one untimed upload; between timed runs the objects are deleted
and `radosgw-admin gc process --include-all` frees them (CEPH_CONF must name the cluster's conf).
The source files are read once (untimed) before each upload so every contender starts with them in
the page cache. CPU-seconds are the whole client process tree's (user+sys), per GB moved.

  flock /tmp/storekit-bench.lock /work/main/.venv/bin/python benchmarks/bench_archive.py --repeat 3
Needs STOREKIT_TEST_S3_ENDPOINT/_KEY/_SECRET (or BENCH_S3_*) in the environment.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

from _measure import become_subreaper, run_measured  # noqa: E402
from bench_io_vs_fio import hold_lock  # noqa: E402

MiB = 1024 * 1024
SHAPE = [
    (4, 640 * MiB, "model/__{i}_0.distcp"),
    (6, 64 * MiB, "optim/shard_{i:02d}.bin"),
    (20, 1 * MiB, "extra/rng_{i:02d}.pt"),
    (10, 2048, "meta/part_{i:02d}.json"),
]
TARGETS = {"upload": ("boto3", 0.9), "download": ("rclone", 0.9)}


def make_payload(src: Path, scale: float) -> int:
    """Incompressible files of the shapes above (sizes times `scale`), made once and reused."""
    total = 0
    for count, full_size, pattern in SHAPE:
        size = max(1, int(full_size * scale))
        for i in range(count):
            path = src / pattern.format(i=i)
            total += size
            if path.exists() and path.stat().st_size == size:
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as fh:
                left = size
                while left:
                    n = min(left, 64 * MiB)
                    fh.write(os.urandom(n))
                    left -= n
    return total


def read_all(src: Path) -> None:
    for root, _, names in os.walk(src):
        for name in names:
            with open(os.path.join(root, name), "rb") as fh:
                while fh.read(16 * MiB):
                    pass


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = Path(args.workdir)
        self.src = self.work / "src"
        self.py = sys.executable
        endpoint = os.environ.get("BENCH_S3_ENDPOINT") or os.environ["STOREKIT_TEST_S3_ENDPOINT"]
        self.env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "BENCH_S3_ENDPOINT": endpoint,
            "BENCH_S3_KEY": os.environ.get("BENCH_S3_KEY") or os.environ["STOREKIT_TEST_S3_KEY"],
            "BENCH_S3_SECRET": os.environ.get("BENCH_S3_SECRET") or os.environ["STOREKIT_TEST_S3_SECRET"],
            "BENCH_BUCKET": f"sk-bench-archive-{uuid.uuid4().hex[:8]}",
        }
        self.env.pop("AWS_CA_BUNDLE", None)  # rclone 1.60 fails with it set
        self.env.update(
            RCLONE_CONFIG_ARCH_TYPE="s3",
            RCLONE_CONFIG_ARCH_PROVIDER="Ceph",
            RCLONE_CONFIG_ARCH_ENDPOINT=endpoint,
            RCLONE_CONFIG_ARCH_ACCESS_KEY_ID=self.env["BENCH_S3_KEY"],
            RCLONE_CONFIG_ARCH_SECRET_ACCESS_KEY=self.env["BENCH_S3_SECRET"],
        )
        self.bucket = self.env["BENCH_BUCKET"]
        self.client = self._client()

    def _client(self) -> Any:
        import boto3
        import botocore.config

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.env["BENCH_S3_ENDPOINT"],
            aws_access_key_id=self.env["BENCH_S3_KEY"],
            aws_secret_access_key=self.env["BENCH_S3_SECRET"],
            config=botocore.config.Config(s3={"addressing_style": "path"}),
        )

    # -- helpers ---------------------------------------------------------------------------------
    def driver(self, *argv: str) -> list[str]:
        return [self.py, str(HERE / "_archive_driver.py"), *argv]

    def measure(self, cmd: list[str], nbytes: int) -> dict[str, Any]:
        m = run_measured(cmd, env=self.env, timeout=1800)
        if m.returncode != 0:
            raise SystemExit(f"{cmd[:3]} failed ({m.returncode}): {m.stderr[-2000:]}")
        return {
            "wall_s": m.wall_s,
            "cpu_s": m.cpu_s,
            "mb_s": nbytes / m.wall_s / 1e6,
            "cpu_s_per_gb": m.cpu_s / (nbytes / 1e9),
            "rss_mib": m.peak_tree_rss / MiB,
        }

    def clear(self, prefix: str) -> None:
        from storekit.config import TierConfig
        from storekit.ops.s3delete import delete_prefix
        from storekit.ops.s3transfer import S3Transfer

        tier = TierConfig(
            name="bench",
            url=f"s3://{self.bucket}",
            options={
                "endpoint_url": self.env["BENCH_S3_ENDPOINT"],
                "key": self.env["BENCH_S3_KEY"],
                "secret": self.env["BENCH_S3_SECRET"],
            },
        )
        with S3Transfer.for_tier(tier) as engine:
            delete_prefix(engine, prefix)
        self.gc()

    def gc(self) -> None:
        subprocess.run(
            ["radosgw-admin", "gc", "process", "--include-all"],
            env=self.env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=600,
        )

    def upload(self, who: str, prefix: str, nbytes: int, digests: Path) -> dict[str, Any]:
        sign = self.args.sign_payload
        read_all(self.src)  # every contender starts with the source in the page cache
        if who == "storekit":
            cmd = self.driver("storekit-up", str(self.src), prefix, sign, str(digests))
        elif who == "boto3":
            cmd = self.driver("boto3-up", str(self.src), prefix, sign)
        else:
            cmd = [
                "rclone",
                "copy",
                "--checksum",
                "--transfers",
                "8",
                str(self.src),
                f"arch:{self.bucket}/{prefix}",
            ]
        return self.measure(cmd, nbytes)

    def download(self, who: str, prefix: str, nbytes: int, digests: Path) -> dict[str, Any]:
        dst = self.work / f"dst-{who}"
        shutil.rmtree(dst, ignore_errors=True)
        dst.mkdir(parents=True)
        if who == "storekit":
            cmd = self.driver("storekit-down", prefix, str(dst), self.args.sign_payload, str(digests))
        else:
            cmd = ["rclone", "copy", "--transfers", "8", f"arch:{self.bucket}/{prefix}", str(dst)]
        result = self.measure(cmd, nbytes)
        got = sum(p.stat().st_size for p in dst.rglob("*") if p.is_file())
        if got != nbytes:
            raise SystemExit(f"{who} download wrote {got} bytes, expected {nbytes}")
        shutil.rmtree(dst)
        return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sign-payload", choices=["on", "off"], default="on")
    ap.add_argument("--workdir", default=str(HERE / ".work" / "archive"))
    ap.add_argument("--scale", type=float, default=1.0, help="file sizes times this (smoke runs)")
    args = ap.parse_args()
    if not os.environ.get("CEPH_CONF"):
        raise SystemExit("CEPH_CONF must name the test cluster's ceph.conf (for radosgw-admin gc)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still removes its bucket
    bench = Bench(args)
    bench.src.mkdir(parents=True, exist_ok=True)
    nbytes = make_payload(bench.src, args.scale)  # before the lock: nobody waits for this
    lock = hold_lock()
    become_subreaper()
    bench.client.create_bucket(Bucket=bench.bucket)
    digests = bench.work / "digests.json"
    rows: dict[str, list[dict[str, Any]]] = {}
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()
    try:
        print(f"warming the OSD with one untimed upload of {nbytes / 1e9:.2f} GB", file=sys.stderr)
        bench.upload("boto3", "warm", nbytes, digests)
        bench.clear("warm")
        uploaders, downloaders = ["storekit", "boto3", "rclone"], ["storekit", "rclone"]
        for rnd in range(args.repeat):
            order = uploaders[rnd % 3 :] + uploaders[: rnd % 3]
            for who in order:
                prefix = f"r{rnd}-{who}"
                r = bench.upload(who, prefix, nbytes, digests)
                rows.setdefault(f"upload:{who}", []).append(r)
                print(
                    f"round {rnd} upload {who}: {r['mb_s']:.0f} MB/s, {r['cpu_s_per_gb']:.2f} CPU-s/GB",
                    file=sys.stderr,
                )
                if who != "storekit":
                    bench.clear(prefix)
            for who in downloaders if rnd % 2 == 0 else downloaders[::-1]:
                r = bench.download(who, f"r{rnd}-storekit", nbytes, digests)
                rows.setdefault(f"download:{who}", []).append(r)
                print(
                    f"round {rnd} download {who}: {r['mb_s']:.0f} MB/s, {r['cpu_s_per_gb']:.2f} CPU-s/GB",
                    file=sys.stderr,
                )
            bench.clear(f"r{rnd}-storekit")
    finally:  # whatever a stopped run left: every object, then the bucket
        for prefix in {
            k["Key"].split("/", 1)[0]
            for k in bench.client.list_objects_v2(Bucket=bench.bucket).get("Contents", [])
        }:
            bench.clear(prefix)
        bench.client.delete_bucket(Bucket=bench.bucket)
    report(rows, nbytes, args, started, load)
    del lock


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB else f"{n} B"


def report(
    rows: dict[str, list[dict[str, Any]]],
    nbytes: int,
    args: argparse.Namespace,
    started: str,
    load: tuple[float, float, float],
) -> None:
    shape = ", ".join(f"{c} x {_size(s)}" for c, s, _ in SHAPE)
    loads = " ".join(f"{x:.2f}" for x in load)
    print(f"\n### archive / recall — {started} (2 cores; payload signing {args.sign_payload})\n")
    print(f"Payload: {nbytes / 2**30:.2f} GiB in 40 files ({shape}); {args.repeat} rounds, order rotated,")
    print(f"medians. Load average at start: {loads}.\n")
    print("| run | MB/s (median) | per round | client CPU-s/GB | peak client RSS |")
    print("| --- | ---: | --- | ---: | ---: |")
    for name, rs in rows.items():
        per = ", ".join(f"{r['mb_s']:.0f}" for r in rs)
        mb_s = statistics.median(r["mb_s"] for r in rs)
        cpu = statistics.median(r["cpu_s_per_gb"] for r in rs)
        rss = max(r["rss_mib"] for r in rs)
        print(f"| {name} | {mb_s:.0f} | {per} | {cpu:.2f} | {rss:.0f} MiB |")
    print("\n| ratio | median of per-round ratios | per-round range | target | verdict |")
    print("| --- | ---: | --- | ---: | --- |")
    comparisons = [(op, peer, target) for op, (peer, target) in TARGETS.items()]
    comparisons.append(("upload", "rclone", 0.0))
    for op, peer, target in comparisons:
        ours, theirs = rows[f"{op}:storekit"], rows[f"{op}:{peer}"]
        ratios = [a["mb_s"] / b["mb_s"] for a, b in zip(ours, theirs, strict=True)]
        med = statistics.median(ratios)
        goal = f"≥ {target}" if target else "-"
        verdict = "-" if not target else "**PASS**" if med >= target else "**FAIL**"
        span = f"{min(ratios):.2f}–{max(ratios):.2f}"
        print(f"| {op}: storekit / {peer} | {med:.2f} | {span} | {goal} | {verdict} |")
    print("\nraw:", json.dumps(rows))


if __name__ == "__main__":
    main()
