#!/usr/bin/env python3
"""storekit tier vs bare boto3 and rclone: archive to, recall from the Ceph S3 gateway, drain POSIX->POSIX.

The unit is ~3 GiB of checkpoint-like files (4 x 640 MiB shards, 6 x 64 MiB, 20 x 1 MiB, 10 small JSON
files), hard-linked from the payload into a scratch tier root (the payload itself is never touched).
storekit runs the calls `storekit tier --apply` makes per unit (storekit.tier.mover via
_archive_driver.py), each contender in its own process, same gateway, same run, order alternating:

  --part s3
  upload   storekit  the tier's S3 engine and upload journal, xxh3-128 in the read pass (no read-back)
           boto3     boto3's transfer manager, 8 threads, 64 MiB parts, no verification
  archive  storekit  archive_unit: copy (xxh3 in the read pass), every byte read back from the gateway,
                     manifest committed, stub written, source freed
           rclone    `rclone copy --checksum --transfers 8` + `rclone check --download` (rclone's plain
                     check compares sizes/ETags only: a flipped bit passes)
  recall   storekit  recall_unit: ranged GETs hashed in the same pass, fsync per file, checked against
                     the manifest, modes/mtimes restored, renamed into place, stub removed
           rclone    `rclone copy --transfers 8` back to a local directory (no verification, no fsync)
  --part drain
  drain    storekit  drain_unit to a second POSIX tier: copy hashed in the pass, fsync, read back from
                     the device (fadvise DONTNEED first), rename, manifest, stub, source freed
           rclone    `rclone copy --checksum --transfers 8` + `rclone check --download` between the dirs

storekit and boto3 use the same payload-signing setting (--sign-payload; default off = UNSIGNED-PAYLOAD,
what `storekit tier` sends: its read-back checks every byte). rclone 1.60 has no such switch: it signs
its multipart parts (SHA-256) and sends single PUTs unsigned either way.
Targets (issue #36, cold): upload >= 0.95x boto3; archive (+ read-back) >= 1.6x rclone copy +
check --download; recall >= 1.0x rclone copy back + sync; drain >= 1.3x rclone copy + check.
The OSD is warmed with one untimed upload; objects are deleted and `radosgw-admin gc process
--include-all` run after each S3 contender (CEPH_CONF must name the cluster's conf).

Every contender starts cold by default, as an archive job meets checkpoints written hours earlier:
after `sync`, every source file's pages are dropped (POSIX_FADV_DONTNEED); a recall reads the
gateway's objects from the OSD. `--warm` reads the source once, untimed, instead. Where storekit
fsyncs what it writes (recall, drain), rclone's time includes a trailing `sync -f` of its
destination. storekit is byte-compiled first, as `pip install` leaves it. CPU-seconds are the
client process tree's (user+sys; the gateway's and OSD's are not counted), per GB moved.

  python benchmarks/bench_archive.py --part s3            # 5 rounds, cold
  python benchmarks/bench_archive.py --part drain --warm   # the source in the page cache
Needs STOREKIT_TEST_S3_ENDPOINT/_KEY/_SECRET (or BENCH_S3_*) in the environment for --part s3.
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

from _measure import become_subreaper, byte_compile, run_measured  # noqa: E402
from bench_io_vs_fio import hold_lock  # noqa: E402

MiB = 1024 * 1024
SHAPE = [
    (4, 640 * MiB, "model/__{i}_0.distcp"),
    (6, 64 * MiB, "optim/shard_{i:02d}.bin"),
    (20, 1 * MiB, "extra/rng_{i:02d}.pt"),
    (10, 2048, "meta/part_{i:02d}.json"),
]
UNIT = "ckpt/step_0000100"
TARGETS = {  # op: (peer, storekit must reach this times the peer's MB/s)
    "upload": ("boto3", 0.95),
    "archive": ("rclone", 1.6),
    "recall": ("rclone", 1.0),
    "drain": ("rclone", 1.3),
}
PHASES = ("plan", "copy", "read_back", "commit", "free")
RCLONE_COPY = ["rclone", "copy", "--checksum", "--transfers", "8"]


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


def link_tree(src: Path, dst: Path) -> None:
    for root, _, names in os.walk(src):
        out = dst / os.path.relpath(root, src)
        out.mkdir(parents=True, exist_ok=True)
        for name in names:
            os.link(os.path.join(root, name), out / name)


def read_all(src: Path) -> None:
    for root, _, names in os.walk(src):
        for name in names:
            with open(os.path.join(root, name), "rb") as fh:
                while fh.read(16 * MiB):
                    pass


def drop_pages(top: Path) -> None:
    """Evict every file under `top` from the page cache (after a sync, so none is dirty)."""
    for root, _, names in os.walk(top):
        for name in names:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def flush(top: Path) -> list[str]:
    """What rclone's copy needs to be as durable as storekit's fsynced one: the file system synced."""
    return ["sync", "-f", str(top)]


def tree_bytes(top: Path) -> int:
    return sum(p.stat().st_size for p in top.rglob("*") if p.is_file() and not p.is_symlink())


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = Path(args.workdir)
        self.src = self.work / "src"
        self.scratch = self.work / "tier"
        self.root = self.scratch / "root"  # the tier the unit lives on
        self.unit = self.root / UNIT
        self.journal = self.scratch / "journal"
        self.parallel = self.scratch / "parallel"  # the drain's destination tier
        self.peer_dst = self.scratch / "peer"  # where rclone copies to
        self.py = sys.executable
        byte_compile(self.py, REPO)  # as installed: rclone and boto3 (site-packages) start compiled
        self.env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.env.pop("AWS_CA_BUNDLE", None)  # rclone 1.60 fails with it set
        self.bucket = ""
        self.client: Any = None
        if args.part == "s3":
            self._s3_env()

    def _s3_env(self) -> None:
        endpoint = os.environ.get("BENCH_S3_ENDPOINT") or os.environ["STOREKIT_TEST_S3_ENDPOINT"]
        key = os.environ.get("BENCH_S3_KEY") or os.environ["STOREKIT_TEST_S3_KEY"]
        secret = os.environ.get("BENCH_S3_SECRET") or os.environ["STOREKIT_TEST_S3_SECRET"]
        self.bucket = f"sk-bench-archive-{uuid.uuid4().hex[:8]}"
        self.env.update(BENCH_S3_ENDPOINT=endpoint, BENCH_S3_KEY=key, BENCH_S3_SECRET=secret)
        self.env.update(BENCH_BUCKET=self.bucket, RCLONE_CONFIG_ARCH_TYPE="s3")
        self.env.update(RCLONE_CONFIG_ARCH_PROVIDER="Ceph", RCLONE_CONFIG_ARCH_ENDPOINT=endpoint)
        self.env.update(RCLONE_CONFIG_ARCH_ACCESS_KEY_ID=key, RCLONE_CONFIG_ARCH_SECRET_ACCESS_KEY=secret)
        import boto3
        import botocore.config

        self.client = boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=key,
            aws_secret_access_key=secret,
            config=botocore.config.Config(s3={"addressing_style": "path"}),
        )

    def setup(self) -> int:
        self.src.mkdir(parents=True, exist_ok=True)
        nbytes = make_payload(self.src, self.args.scale)
        shutil.rmtree(self.scratch, ignore_errors=True)  # hard links and recalled copies only
        link_tree(self.src, self.unit)
        for d in (self.journal, self.parallel, self.peer_dst):
            d.mkdir(parents=True)
        return nbytes

    # -- running and measuring ---------------------------------------------------------------------
    def driver(self, *argv: str) -> list[str]:
        return [self.py, str(HERE / "_archive_driver.py"), *argv]

    def measure(self, cmds: list[list[str]], nbytes: int) -> dict[str, Any]:
        """The commands one after the other (one contender), each measured; walls and CPU summed."""
        os.sync()
        if self.unit.exists():  # a recall's source is the bucket; its destination has no pages yet
            if self.args.warm:
                read_all(self.unit)
            else:
                drop_pages(self.unit)
        wall = cpu = rss = 0.0
        phases: dict[str, float] = {}
        for cmd in cmds:
            m = run_measured(cmd, env=self.env, timeout=1800)
            if m.returncode != 0:
                raise SystemExit(f"{cmd[:3]} failed ({m.returncode}): {m.stderr[-2000:]}")
            wall, cpu, rss = wall + m.wall_s, cpu + m.cpu_s, max(rss, m.peak_tree_rss / MiB)
            if cmd[1:2] == [str(HERE / "_archive_driver.py")] and m.stdout.strip():
                phases = json.loads(m.stdout.strip().splitlines()[-1]).get("phases", {})
        os.sync()  # a contender that did not fsync leaves its writeback out of the next one's time
        gb = nbytes / 1e9
        return {
            "wall_s": wall,
            "cpu_s": cpu,
            "mb_s": gb * 1e3 / wall,
            "cpu_s_per_gb": cpu / gb,
            "rss_mib": rss,
            "phases": phases,  # storekit's own laps of the move (UnitResult.phases), seconds
        }

    def sign(self) -> str:
        return str(self.args.sign_payload)

    def clear(self, prefix: str) -> None:
        from storekit.config import TierConfig
        from storekit.ops.s3transfer import S3Transfer
        from storekit.store.s3delete import delete_prefix

        options = {k: self.env[f"BENCH_S3_{k.upper()}"] for k in ("key", "secret")}
        options["endpoint_url"] = self.env["BENCH_S3_ENDPOINT"]
        tier = TierConfig(name="bench", url=f"s3://{self.bucket}", options=options)
        with S3Transfer.for_tier(tier) as engine:
            delete_prefix(engine, prefix)
        subprocess.run(
            ["radosgw-admin", "gc", "process", "--include-all"],
            env=self.env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600,
        )  # fmt: skip

    # -- contenders ----------------------------------------------------------------------------------
    def upload(self, who: str, prefix: str, nbytes: int) -> dict[str, Any]:
        if who == "storekit":
            cmd = self.driver("storekit-upload", str(self.root), UNIT, prefix, self.sign(), str(self.journal))
        else:
            cmd = self.driver("boto3-up", str(self.unit), prefix, self.sign())
        result = self.measure([cmd], nbytes)
        self.clear(prefix)
        return result

    def archive(self, who: str, prefix: str, nbytes: int) -> dict[str, Any]:
        if who == "storekit":
            cmd = self.driver(
                "storekit-archive", str(self.root), UNIT, prefix, self.sign(), str(self.journal)
            )
            return self.measure([cmd], nbytes)  # the source is freed: a recall brings it back
        remote = f"arch:{self.bucket}/{prefix}/{UNIT}"
        check = ["rclone", "check", "--download", str(self.unit), remote]
        result = self.measure([[*RCLONE_COPY, str(self.unit), remote], check], nbytes)
        self.clear(prefix)
        return result

    def recall(self, who: str, prefix: str, nbytes: int) -> dict[str, Any]:
        if who == "storekit":
            cmd = self.driver("storekit-recall", str(self.root), UNIT, prefix, self.sign(), str(self.journal))
            result = self.measure([cmd], nbytes)
            got = tree_bytes(self.unit)
        else:
            dst = self.peer_dst / UNIT
            cmd = ["rclone", "copy", "--transfers", "8", f"arch:{self.bucket}/{prefix}/{UNIT}", str(dst)]
            result = self.measure([cmd, flush(self.peer_dst)], nbytes)  # storekit fsyncs each file
            got = tree_bytes(dst)
            shutil.rmtree(self.peer_dst / UNIT.split("/")[0])
        if got != nbytes:
            raise SystemExit(f"{who} recall wrote {got} bytes, expected {nbytes}")
        return result

    def drain(self, who: str, nbytes: int) -> dict[str, Any]:
        from storekit.manifest import UNIT_MANIFEST_SUFFIX
        from storekit.tier.stubfile import stub_path

        if who == "storekit":
            cmd = self.driver("storekit-drain", str(self.root), UNIT, str(self.parallel), str(self.journal))
            result = self.measure([cmd], nbytes)
            moved = self.parallel / UNIT
            if tree_bytes(moved) != nbytes or self.unit.exists():
                raise SystemExit(f"storekit drain: {moved} is not the whole unit, or the source remains")
            os.rename(moved, self.unit)  # untimed: back for the next contender
            stub_path(self.unit).unlink()
            (moved.parent / f"{moved.name}{UNIT_MANIFEST_SUFFIX}").unlink()
            return result
        dst = self.peer_dst / UNIT
        check = ["rclone", "check", "--download", str(self.unit), str(dst)]
        copy = [*RCLONE_COPY, str(self.unit), str(dst)]
        result = self.measure([copy, flush(self.peer_dst), check], nbytes)
        if tree_bytes(dst) != nbytes:
            raise SystemExit(f"rclone drain wrote {tree_bytes(dst)} bytes, expected {nbytes}")
        shutil.rmtree(self.peer_dst / UNIT.split("/")[0])
        return result


def s3_rounds(bench: Bench, nbytes: int, rows: dict[str, list[dict[str, Any]]]) -> None:
    def note(op: str, who: str, r: dict[str, Any]) -> None:
        rows.setdefault(f"{op}:{who}", []).append(r)
        line = f"{op} {who}: {r['mb_s']:.0f} MB/s, {r['cpu_s_per_gb']:.2f} CPU-s/GB"
        if r["phases"]:
            line += " (" + ", ".join(f"{k} {v:.1f}s" for k, v in r["phases"].items()) + ")"
        print(line, file=sys.stderr, flush=True)

    print(f"warming the OSD with one untimed upload of {nbytes / 1e9:.2f} GB", file=sys.stderr)
    bench.upload("boto3", "warm", nbytes)
    for rnd in range(bench.args.repeat):
        print(f"round {rnd + 1}", file=sys.stderr)
        flip = rnd % 2 == 1
        for who in ["boto3", "storekit"] if flip else ["storekit", "boto3"]:
            note("upload", who, bench.upload(who, f"up-{rnd}-{who}", nbytes))
        if flip:
            archive_and_recall(bench, f"ar-{rnd}", nbytes, flip, note)
        note("archive", "rclone", bench.archive("rclone", f"rc-{rnd}", nbytes))
        if not flip:
            archive_and_recall(bench, f"ar-{rnd}", nbytes, flip, note)


def archive_and_recall(bench: Bench, prefix: str, nbytes: int, flip: bool, note: Any) -> None:
    """storekit's archive frees the source; both recalls read its objects, storekit's brings it back."""
    note("archive", "storekit", bench.archive("storekit", prefix, nbytes))
    for who in ["rclone", "storekit"] if flip else ["storekit", "rclone"]:
        note("recall", who, bench.recall(who, prefix, nbytes))
    bench.clear(prefix)


def drain_rounds(bench: Bench, nbytes: int, rows: dict[str, list[dict[str, Any]]]) -> None:
    for rnd in range(bench.args.repeat):
        for who in ["rclone", "storekit"] if rnd % 2 else ["storekit", "rclone"]:
            r = bench.drain(who, nbytes)
            rows.setdefault(f"drain:{who}", []).append(r)
            print(f"round {rnd + 1} drain {who}: {r['mb_s']:.0f} MB/s, {r['cpu_s_per_gb']:.2f} CPU-s/GB",
                  file=sys.stderr, flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=["s3", "drain"], required=True)
    ap.add_argument("--repeat", type=int, default=5, help="rounds, order alternating (default 5)")
    ap.add_argument("--warm", action="store_true", help="start each contender with the source cached")
    ap.add_argument("--sign-payload", choices=["on", "off"], default="off")
    ap.add_argument("--workdir", default=str(HERE / ".work" / "archive"), help="holds src/ (the payload)")
    ap.add_argument("--scale", type=float, default=1.0, help="file sizes times this (smoke runs)")
    args = ap.parse_args()
    if args.part == "s3" and not os.environ.get("CEPH_CONF"):
        raise SystemExit("CEPH_CONF must name the test cluster's ceph.conf (for radosgw-admin gc)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still removes its bucket
    bench = Bench(args)
    nbytes = bench.setup()  # before the lock: nobody waits for this
    lock = hold_lock()
    become_subreaper()
    rows: dict[str, list[dict[str, Any]]] = {}
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()
    if args.part == "drain":
        drain_rounds(bench, nbytes, rows)
    else:
        bench.client.create_bucket(Bucket=bench.bucket)
        try:
            s3_rounds(bench, nbytes, rows)
        finally:  # whatever a stopped run left: every object, then the bucket
            listed = bench.client.list_objects_v2(Bucket=bench.bucket).get("Contents", [])
            for prefix in {k["Key"].split("/", 1)[0] for k in listed}:
                bench.clear(prefix)
            bench.client.delete_bucket(Bucket=bench.bucket)
    del lock
    report(rows, nbytes, args, started, load)


def _report_phases(rows: dict[str, list[dict[str, Any]]]) -> None:
    """storekit's moves lap by lap (medians): the copy (read + send + hash) vs what the read-back
    still took after the last byte was sent, commit and free."""
    timed = {name: rs for name, rs in rows.items() if name.endswith(":storekit") and rs[0].get("phases")}
    if not timed:
        return
    print("\n| storekit run | " + " | ".join(PHASES) + " | (seconds, medians) |")
    print("| --- |" + " ---: |" * len(PHASES) + " --- |")
    for name, rs in timed.items():
        cells = [statistics.median(r["phases"].get(p, 0.0) for r in rs) for p in PHASES]
        print(f"| {name} | " + " | ".join(f"{c:.2f}" for c in cells) + " | |")


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB else f"{n} B"


def report(
    rows: dict[str, list[dict[str, Any]]], nbytes: int, args: argparse.Namespace, started: str, load: Any
) -> None:
    shape = ", ".join(f"{c} x {_size(max(1, int(s * args.scale)))}" for c, s, _ in SHAPE)
    loads = " ".join(f"{x:.2f}" for x in load)
    sign = args.sign_payload
    cache = "warm (source read first)" if args.warm else "cold (source pages dropped per contender)"
    print(f"\n### storekit tier --part {args.part} — {started} (2 cores; payload signing {sign}; {cache})\n")
    print(f"Unit: {nbytes / 2**30:.2f} GiB in 40 files ({shape}); {args.repeat} rounds, order alternating,")
    print(f"medians. Load average at start: {loads}.\n")
    print("| run | MB/s (median) | per round | client CPU-s/GB | peak client RSS |")
    print("| --- | ---: | --- | ---: | ---: |")
    for name, rs in rows.items():
        per = ", ".join(f"{r['mb_s']:.0f}" for r in rs)
        mb_s = statistics.median(r["mb_s"] for r in rs)
        cpu = statistics.median(r["cpu_s_per_gb"] for r in rs)
        rss = max(r["rss_mib"] for r in rs)
        print(f"| {name} | {mb_s:.0f} | {per} | {cpu:.2f} | {rss:.0f} MiB |")
    _report_phases(rows)
    print("\n| ratio | median of per-round ratios | per-round range | target | verdict |")
    print("| --- | ---: | --- | ---: | --- |")
    for op, (peer, target) in TARGETS.items():
        if f"{op}:storekit" not in rows:
            continue
        ours, theirs = rows[f"{op}:storekit"], rows[f"{op}:{peer}"]
        ratios = [a["mb_s"] / b["mb_s"] for a, b in zip(ours, theirs, strict=True)]
        med = statistics.median(ratios)
        verdict = "**PASS**" if med >= target else "**FAIL**"
        span = f"{min(ratios):.2f}–{max(ratios):.2f}"
        print(f"| {op}: storekit / {peer} | {med:.2f} | {span} | ≥ {target} | {verdict} |")
    print("\nraw:", json.dumps(rows))


if __name__ == "__main__":
    main()
