#!/usr/bin/env python3
"""storekit bench io vs fio (Debian fio 3.33) on this machine's disk, and vs a bare boto3 loop on S3.

Both tools run with the same parameters, side by side in one run, alternating which goes first, for
--disk-repeat / --meta-repeat / --repeat (S3) rounds; the medians, spreads ((max-min)/median) and the
ratio storekit/fio (the median of the per-round ratios; the ratio of the medians beside it) are printed
with PASS when the ratio is within +-10%, plus the CPU each tool used, and a markdown block for
benchmarks/RESULTS.md.

  POSIX (a directory on / by default), storekit pattern vs fio job:
    sequential write 1 MiB O_DIRECT, fsync timed   shards write  vs rw=write psync end_fsync=1
    sequential read 1 MiB O_DIRECT                  shards read   vs rw=read psync
    random read 4 KiB at queue depth 32             tokens        vs randread io_uring iodepth=32
    random read 4 KiB at queue depth 1 (extra)      tokens        vs randread psync
    small files: create / stat / delete             meta          vs filecreate / filestat / filedelete
                                                                     (file_service_type=sequential)
  fio's buffers are on huge pages (iomem=mmaphuge; 8 pages reserved while it runs, which needs root),
  as storekit's are: see storekit/bench/iobuf.py for why that decides the sequential-write figure.
  Before every tool invocation (each fio job, each storekit run) the filesystem is synced and the
  disk left to go idle, as storekit does before each of its phases: what the previous tool left
  behind (dirty inodes, freed blocks) is not timed in the next one's window.
  A comparison whose rounds fall into separate modes (a 3x jump, e.g. ext4 creates that scan
  recently deleted inodes) is judged per mode, on the rounds each tool ran in that mode.
  S3 (Ceph RGW): PUT/GET of large objects and put/head/get/delete of small ones, storekit vs the same
  requests from a bare boto3 loop (same sizes, count, concurrency and key shapes, processes started
  on a barrier).

  On a shared file system: --dir a directory on the mount, e.g. a ceph-fuse mount of CephFS
  (scripts/services/cephfs-up.sh); both tools then go through the same FUSE daemon (O_DIRECT there
  bypasses only the kernel's page cache, see `storekit bench io --help`). Without a block device to
  watch, settling is a sync only; a statfs of 0 blocks (no ceph-mgr) skips the free-space check.

Run it holding the machine-wide benchmark lock (it takes the lock itself when not run under flock):
  flock /tmp/storekit-bench.lock /tmp/venv/bin/python benchmarks/bench_io_vs_fio.py
"""

from __future__ import annotations

import argparse
import fcntl
import itertools
import json
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
LOCK = "/tmp/storekit-bench.lock"
TOLERANCE = 0.10
MiB = 1024 * 1024


# -- the lock -------------------------------------------------------------------------------------


def under_flock() -> bool:
    """True when an ancestor is `flock /tmp/storekit-bench.lock ...` (it holds the lock for us)."""
    pid = os.getppid()
    while pid > 1:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        if cmd and os.path.basename(cmd[0]) == b"flock" and LOCK.encode() in cmd:
            return True
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return False


def hold_lock() -> Any:
    if under_flock():
        return None
    fh = open(LOCK, "a")  # noqa: SIM115 -- held for the whole run
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"waiting for {LOCK} (another benchmark is running)...", file=sys.stderr, flush=True)
        fcntl.flock(fh, fcntl.LOCK_EX)
    return fh


# -- measurements ---------------------------------------------------------------------------------


@dataclass
class Comparison:
    name: str
    unit: str  # "MB/s" or "ops/s" or "IOPS"
    peer: str
    storekit: list[float] = field(default_factory=list)
    other: list[float] = field(default_factory=list)
    storekit_cpu: list[float] = field(default_factory=list)  # % of one core (user+sys)
    storekit_user: list[float] = field(default_factory=list)  # % of one core in user space
    other_cpu: list[float] = field(default_factory=list)
    required: bool = True

    def forget(self) -> None:
        """Drop what the warm-up rounds recorded."""
        for values in (self.storekit, self.other, self.storekit_cpu, self.storekit_user, self.other_cpu):
            values.clear()

    def stats(self, values: list[float]) -> tuple[float, float]:
        med = statistics.median(values)
        return med, (max(values) - min(values)) / med if med else 0.0

    @property
    def ratio(self) -> float:
        """The median of the per-round ratios: the rounds alternate the two tools, so a round's pair
        shares the machine's state of that minute, and the host's drift cancels in each ratio."""
        return statistics.median(a / b for a, b in zip(self.storekit, self.other, strict=True))

    @property
    def ratio_of_medians(self) -> float:
        return statistics.median(self.storekit) / statistics.median(self.other)

    def modes(self) -> list[dict[str, Any]] | None:
        """Both tools' rounds split where the pooled values jump 3x or more (stats.modes); None when
        they form one group. Per mode: each tool's rounds in it, the ratio of their medians, and
        the median ratio over the rounds in which both tools ran in that mode."""
        from storekit.bench.stats import modes

        groups = modes(self.storekit + self.other)
        if groups is None:
            return None
        out = []
        for g in groups:
            inside = lambda v, g=g: g["min"] <= v <= g["max"]  # noqa: E731
            sk = [v for v in self.storekit if inside(v)]
            ot = [v for v in self.other if inside(v)]
            pairs = [a / b for a, b in zip(self.storekit, self.other, strict=True) if inside(a) and inside(b)]
            ratio = statistics.median(sk) / statistics.median(ot) if sk and ot else None
            out.append({
                "storekit_values": sk, "peer_values": ot,
                "storekit_median": statistics.median(sk) if sk else None,
                "peer_median": statistics.median(ot) if ot else None,
                "ratio": ratio,
                "paired_ratio": statistics.median(pairs) if pairs else None,
                "paired_rounds": len(pairs),
            })  # fmt: skip
        both = [m for m in out if len(m["storekit_values"]) >= 2 and len(m["peer_values"]) >= 2]
        judged = both or [m for m in out if m["ratio"] is not None]
        for m in out:
            m["judged"] = m in judged
        return out

    @property
    def passed(self) -> bool:
        """Within tolerance; for a bimodal comparison, in every mode both tools ran at least twice
        (or, failing that, at least once); no common mode at all fails."""
        modes = self.modes()
        if modes is None:
            return abs(self.ratio - 1) <= TOLERANCE
        judged = [m for m in modes if m["judged"]]
        return bool(judged) and all(abs(m["ratio"] - 1) <= TOLERANCE for m in judged)

    def row(self) -> dict[str, Any]:
        sk, sk_spread = self.stats(self.storekit)
        ot, ot_spread = self.stats(self.other)
        return {
            "name": self.name,
            "unit": self.unit,
            "peer": self.peer,
            "storekit_median": sk,
            "storekit_spread": sk_spread,
            "peer_median": ot,
            "peer_spread": ot_spread,
            "ratio": self.ratio,
            "ratio_of_medians": self.ratio_of_medians,
            "pass": self.passed,
            "required": self.required,
            "storekit_cpu_pct": statistics.median(self.storekit_cpu) if self.storekit_cpu else None,
            "storekit_user_pct": statistics.median(self.storekit_user) if self.storekit_user else None,
            "peer_cpu_pct": statistics.median(self.other_cpu) if self.other_cpu else None,
            "storekit_values": self.storekit,
            "peer_values": self.other,
            "modes": self.modes(),
        }


SETTLE_DEVICE: list[str] = []  # /sys/class/block/<dev>/stat of the measured directory, when known


def settle() -> None:
    """sync, then wait (up to 5 s) until the disk has had nothing in flight for 50 ms."""
    os.sync()
    if not SETTLE_DEVICE:
        return
    deadline, idle_since = time.monotonic() + 5.0, None
    while time.monotonic() < deadline:
        fields = Path(SETTLE_DEVICE[0]).read_text().split()
        now = time.monotonic()
        if int(fields[8]) == 0:  # in_flight
            idle_since = idle_since or now
            if now - idle_since >= 0.05:
                return
        else:
            idle_since = None
        time.sleep(0.005)


def storekit(*args: str) -> dict[str, Any]:
    settle()
    cmd = [sys.executable, "-m", "storekit", "bench", "io", *args, "--repeat", "1", "--json", "--quiet"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"storekit failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr}")
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def phase(doc: dict[str, Any], pattern: str, name: str, label_has: str = "") -> dict[str, Any]:
    for point in doc["results"]:
        if point["pattern"] == pattern and label_has in point["label"]:
            for ph in point["phases"]:
                if ph["phase"] == name:
                    rep: dict[str, Any] = ph["repeats"][0]
                    return rep
    raise KeyError(f"{pattern} {name} {label_has}")


def cpu_pct(rep: dict[str, Any]) -> tuple[float, float]:
    """The busiest worker's CPU, % of one core: (user+sys, user)."""
    cpu = rep["cpu"]
    return cpu["max_worker_pct_of_core"], cpu["max_worker_user_pct_of_core"]


FIO_IOMEM: list[str] = []  # ["--iomem=mmaphuge"] once huge pages are reserved (see reserve_huge_pages)


def reserve_huge_pages(count: int) -> Any:
    """Reserve `count` 2 MiB huge pages for fio's buffers; returns an undo function (None if refused).

    storekit's buffers sit on transparent huge pages, so a 1 MiB direct request reaches the disk
    whole; fio's malloc'd buffers are 4 KiB pages, and past the queue's max_segments a 1 MiB request
    is split in two (measured here: 2 requests per MiB and half the write rate). fio's own answer is
    iomem=mmaphuge, which needs reserved huge pages (root)."""
    knob = Path("/proc/sys/vm/nr_hugepages")
    try:
        before = int(knob.read_text())
        knob.write_text(str(before + count))
    except OSError as exc:
        print(f"warning: cannot reserve huge pages ({exc}); fio runs on 4 KiB pages", file=sys.stderr)
        return None
    free = huge_pages_free()
    if free < count:  # memory too fragmented for 2 MiB pages: compact it and try again
        Path("/proc/sys/vm/compact_memory").write_text("1")
        knob.write_text(str(before + count))
        free = huge_pages_free()
    if free < count:
        knob.write_text(str(before))
        # without them fio's 1 MiB requests split at random (see iobuf.py): refuse to measure that
        raise SystemExit(
            f"only {free} of {count} huge pages could be reserved for fio; free memory and rerun"
        )
    FIO_IOMEM[:] = ["--iomem=mmaphuge"]
    return lambda: knob.write_text(str(before))


def huge_pages_free() -> int:
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    return int(next(ln.split()[1] for ln in meminfo if ln.startswith("HugePages_Free:")))


def write_requests() -> int:
    """Write requests the measured disk has completed so far (0 when the device is unknown)."""
    return int(Path(SETTLE_DEVICE[0]).read_text().split()[4]) if SETTLE_DEVICE else 0


REQUESTS_PER_MIB: dict[str, list[float]] = {"storekit": [], "fio": []}  # sequential writes


def fio(*args: str) -> dict[str, Any]:
    settle()
    cmd = ["fio", "--output-format=json", *FIO_IOMEM, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"fio failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr}")
    out = proc.stdout[proc.stdout.index("{") :]  # fio may print notes before the JSON
    job: dict[str, Any] = json.loads(out)["jobs"][0]
    return job


def fio_cpu(job: dict[str, Any]) -> float:
    return float(job["usr_cpu"]) + float(job["sys_cpu"])


def fresh_dirs(fio_dir: Path) -> Iterator[Path]:
    """A new <dir>/scratch/<round>/data directory for each of fio's runs, as storekit makes
    <target>/scratch/<run id>/... for each of its runs. Same life cycle, same placement: ext4 takes
    a large file's blocks from a stream goal picked by its inode number (8 of 8 files, 2026-11-23:
    even inodes got blocks near the start of this 252 GB disk, odd ones near its end), and a file
    re-created in one directory every round tends to get the same inode back, so fio's file stayed
    in one region for a whole run while storekit's moved between rounds."""
    for i in itertools.count():
        where = fio_dir / f"round-{i:03d}" / "scratch" / "data"
        where.mkdir(parents=True)
        yield where


WARMUP = 1  # --warmup: rounds of each pair run first and discarded


def alternate(rounds: int, first: Any, second: Any, comps: list[Comparison]) -> None:
    """Run the pair `rounds` times, swapping which goes first, so drift hits both equally.

    Before them, WARMUP rounds whose figures are dropped: a pair's first round met a machine no
    other round meets (the first create of a run finds no recently deleted inodes and runs in the
    fast mode; run 3-5's first sequential-write ratios were 0.78, 1.25, 0.76 against 0.86-1.17
    after), as fio's ramp_time leaves a job's first seconds out."""
    for i in range(WARMUP):
        for step in (first, second) if i % 2 == 0 else (second, first):
            step()
    for comp in comps:
        comp.forget()
    for i in range(rounds):
        order = (first, second) if i % 2 == 0 else (second, first)
        for step in order:
            step()


def seq_comparisons(args: argparse.Namespace, sk_dir: Path, fio_dir: Path) -> list[Comparison]:
    size = args.size
    seq_w = Comparison(
        "sequential write 1 MiB, O_DIRECT, fsync timed", "MB/s", "fio rw=write psync end_fsync=1"
    )
    seq_r = Comparison("sequential read 1 MiB, O_DIRECT", "MB/s", "fio rw=read psync")
    fresh = fresh_dirs(fio_dir)
    common = ["--target", str(sk_dir), "--no-drop-caches", "--block-size", "1M"]

    def storekit_seq() -> None:
        before = write_requests()
        doc = storekit(*common, "--pattern", "shards", "--workers", "1", "--size", size, "--file-size", size)
        REQUESTS_PER_MIB["storekit"].append((write_requests() - before) / (parse_bytes(size) >> 20))
        for comp, name in ((seq_w, "write"), (seq_r, "read")):
            rep = phase(doc, "shards", name)
            comp.storekit.append(rep["bandwidth_bytes_per_s"] / 1e6)
            total, user = cpu_pct(rep)
            comp.storekit_cpu.append(total)
            comp.storekit_user.append(user)

    def fio_seq() -> None:
        seq_file = next(fresh) / "seq.bin"
        base = [f"--filename={seq_file}", "--bs=1M", f"--size={size}", "--direct=1", "--ioengine=psync"]
        before = write_requests()
        w = fio("--name=seqwrite", "--rw=write", "--end_fsync=1", "--fallocate=none", *base)
        REQUESTS_PER_MIB["fio"].append((write_requests() - before) / (parse_bytes(size) >> 20))
        r = fio("--name=seqread", "--rw=read", *base)
        # removed right away, as storekit removes its file at the end of its run: the freed blocks
        # (discarded on this mount) then weigh on whichever tool runs next, alike for both
        shutil.rmtree(seq_file.parent.parent.parent)
        seq_w.other.append(w["write"]["bw_bytes"] / 1e6)
        seq_w.other_cpu.append(fio_cpu(w))
        seq_r.other.append(r["read"]["bw_bytes"] / 1e6)
        seq_r.other_cpu.append(fio_cpu(r))

    log("sequential write + read", args.disk_repeat)
    alternate(args.disk_repeat, storekit_seq, fio_seq, [seq_w, seq_r])
    return [seq_w, seq_r]


def rand_comparisons(args: argparse.Namespace, sk_dir: Path, fio_dir: Path) -> list[Comparison]:
    common = ["--target", str(sk_dir), "--no-drop-caches", "--block-size", "1M"]
    fresh = fresh_dirs(fio_dir)
    comps = []
    depths = [(32, "io_uring", True), (1, "psync", False)]
    for qd, engine, required in (d for d in depths if str(d[0]) in args.rand_depths.split(",")):
        comp = Comparison(
            f"random read 4 KiB, queue depth {qd}, O_DIRECT",
            "IOPS",
            f"fio randread {engine} iodepth={qd}",
            required=required,
        )

        def storekit_rand(comp: Comparison = comp, qd: int = qd) -> None:
            doc = storekit(*common, "--pattern", "tokens", "--workers", "1", "--queue-depth", str(qd),
                           "--seq-len", "2048", "--token-bytes", "2", "--size", args.rand_size,
                           "--file-size", args.rand_size, "--duration", str(args.rand_runtime))  # fmt: skip
            rep = phase(doc, "tokens", "randread")
            comp.storekit.append(rep["ops_per_s"])
            total, user = cpu_pct(rep)
            comp.storekit_cpu.append(total)
            comp.storekit_user.append(user)

        def fio_rand(comp: Comparison = comp, qd: int = qd, engine: str = engine) -> None:
            # a fresh data file each round, written and later removed like storekit's token data set
            rand_file = next(fresh) / "rand.bin"
            fio("--name=layout", f"--filename={rand_file}", "--rw=write", "--bs=1M",
                f"--size={args.rand_size}", "--direct=1", "--ioengine=psync")  # fmt: skip
            job = fio("--name=randread", f"--filename={rand_file}", "--rw=randread", "--bs=4k",
                      f"--size={args.rand_size}", "--direct=1", f"--ioengine={engine}", f"--iodepth={qd}",
                      "--norandommap", "--time_based", f"--runtime={args.rand_runtime}")  # fmt: skip
            shutil.rmtree(rand_file.parent.parent.parent)
            comp.other.append(job["read"]["iops"])
            comp.other_cpu.append(fio_cpu(job))

        log(f"random read QD{qd}", args.disk_repeat)
        alternate(args.disk_repeat, storekit_rand, fio_rand, [comp])
        comps.append(comp)
    return comps


SMALL_FILE_TIMERS: set[str] = set()  # "c" or "python": how storekit timed its small-file operations


def meta_comparisons(args: argparse.Namespace, sk_dir: Path, fio_dir: Path) -> list[Comparison]:
    """Small files. Both tools time each operation's system calls alone, in C (storekit's
    timed_ops.c; the conditions line says when it fell back to Python); their wall-clock rates also carry
    each tool's own per-file bookkeeping, so the rate both timers measure is what must agree: 1 / the
    median operation latency. Not the mean: 5,000 stats take ~15 ms, and one 5 ms stall of the vCPU in
    that window (the host's doing) moves the mean by a third, and not the median. The mean-based and
    wall-clock rates are shown as extras. Percentiles: both tools bucket latencies log-linearly
    with 64 sub-buckets per power of two (fio's clat histogram, storekit's stats.py), so <1 % apart.
    fio visits the files in order (file_service_type=sequential), as storekit does: its default,
    roundrobin, scans its file list for each pick (~130 us per file at 5000 files), which leaves each
    timed call on cold CPU caches (measured: stat 2.7 vs 2.4 us, unlink 11.4 vs 8.4 us)."""
    n = str(args.files)
    what = {"create": "create", "stat": "stat", "delete": "delete"}
    service = {
        k: Comparison(f"small files: {v}, 1 / median latency", "ops/s", f"fio file{k} 1/clat p50")
        for k, v in what.items()
    }
    mean = {
        k: Comparison(f"small files: {v}, 1 / mean latency", "ops/s", f"fio file{k} 1/clat", required=False)
        for k, v in what.items()
    }
    wall = {
        k: Comparison(f"small files: {v}, files / wall time", "ops/s", f"fio file{k} iops", required=False)
        for k, v in what.items()
    }
    # the same depth and name lengths as storekit's <target>/scratch/<run id>/meta-unique/w0000/w0000.N
    # (at ~3 us a stat, every path component the kernel walks shows in the figure), and the same
    # parent: a fresh run directory beside storekit's in its scratch/ each round. With one fixed
    # directory of its own, fio's creates ran 1.1-1.5x faster whenever fio followed itself (run 7:
    # every round fio went first) and not when it followed storekit: where the new inodes land, and
    # how many inodes deleted in the last 30 s a create skips there, follows the directory
    runs = itertools.count()

    def storekit_meta() -> None:
        # the same life cycle as the fio jobs below: empty files created, stat'ed, deleted, one worker
        doc = storekit("--target", str(sk_dir), "--no-drop-caches", "--pattern", "meta", "--workers", "1",
                       "--files", n, "--small-file-size", "0")  # fmt: skip
        SMALL_FILE_TIMERS.add(doc["environment"]["small_file_timer"]["timer"])
        for name in what:
            rep = phase(doc, "meta", name, "dirs=unique")
            total, user = cpu_pct(rep)
            for comp, value in (
                (service[name], 1e3 / rep["latency"]["p50_ms"]),
                (mean[name], 1e3 / rep["latency"]["mean_ms"]),
                (wall[name], rep["ops_per_s"]),
            ):
                comp.storekit.append(value)
                comp.storekit_cpu.append(total)
                comp.storekit_user.append(user)

    def fio_meta() -> None:
        # storekit's life cycle, mirrored: its meta run does a per-worker directory (measured), then
        # a shared one (not compared), each create/stat/delete; fio does the same two, and only the
        # first is compared. Both thereby leave the next round the same number of recently deleted
        # inodes, which decide whether its creates are fast or slow (RESULTS.md)
        run_dir = sk_dir / "scratch" / f"fio-peer-{next(runs):031d}"
        meta_dir = run_dir / "meta-unique" / "w0000"
        for compared, where in ((True, meta_dir), (False, run_dir / "meta-shared")):
            where.mkdir(parents=True)
            for name in what:
                # filecreate makes empty files; filestat and filedelete (create_on_open: nothing is
                # laid out first) stat and unlink those same files
                job = fio("--name=w0000", f"--ioengine=file{name}", f"--directory={where}",
                          f"--nrfiles={n}", "--filesize=4k", "--bs=4k", "--openfiles=1",
                          "--create_on_open=1", "--unlink=0", "--file_service_type=sequential")  # fmt: skip
                if not compared:
                    continue
                ddir = "write" if job["write"]["total_ios"] else "read"
                for comp, value in (
                    (service[name], 1e9 / job[ddir]["clat_ns"]["percentile"]["50.000000"]),
                    (mean[name], 1e9 / job[ddir]["clat_ns"]["mean"]),
                    (wall[name], job[ddir]["iops"]),
                ):
                    comp.other.append(value)
                    comp.other_cpu.append(fio_cpu(job))
            shutil.rmtree(where, ignore_errors=True)
        shutil.rmtree(run_dir, ignore_errors=True)

    log("small files", args.meta_repeat)
    alternate(args.meta_repeat, storekit_meta, fio_meta, [*service.values(), *mean.values(), *wall.values()])
    return [*service.values(), *mean.values(), *wall.values()]


# -- S3: storekit vs a bare boto3 loop ------------------------------------------------------------


def boto3_client(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(
        s3={"addressing_style": "path"},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", config=config)


def bare_worker(
    endpoint: str, bucket: str, op: str, keys: list[str], size: int, barrier: Any, out: Any
) -> None:
    """The loop anyone would write: one client, one request after the other."""
    client = boto3_client(endpoint)
    body = os.urandom(size)
    barrier.wait()
    start = time.time()
    for key in keys:
        if op == "put":
            client.put_object(Bucket=bucket, Key=key, Body=body)
        elif op == "get":
            client.get_object(Bucket=bucket, Key=key)["Body"].read()
        elif op == "head":
            client.head_object(Bucket=bucket, Key=key)
        else:
            client.delete_object(Bucket=bucket, Key=key)
    out.put((start, time.time()))


def bare_loop(endpoint: str, bucket: str, op: str, keys: list[str], size: int, workers: int) -> float:
    """Requests per second (objects) over last finish - first start, workers as processes."""
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(workers), ctx.Queue()
    shares = [keys[w::workers] for w in range(workers)]
    procs = [
        ctx.Process(target=bare_worker, args=(endpoint, bucket, op, s, size, barrier, out)) for s in shares
    ]
    for p in procs:
        p.start()
    spans = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return len(keys) / (max(e for _, e in spans) - min(s for s, _ in spans))


def s3_comparisons(args: argparse.Namespace) -> list[Comparison]:
    endpoint = args.s3_endpoint
    client = boto3_client(endpoint)
    bucket = f"sk-bench-io-{os.getpid()}"
    client.create_bucket(Bucket=bucket)
    big, n_big, workers = 16 * MiB, 32, 4
    small, n_small = 64 * 1024, args.s3_files
    comps = {
        "put": Comparison(f"S3 PUT {n_big} x 16 MiB, {workers} workers", "MB/s", "bare boto3 loop"),
        "get": Comparison(f"S3 GET {n_big} x 16 MiB, {workers} workers", "MB/s", "bare boto3 loop"),
        "sput": Comparison(f"S3 PUT {n_small} x 64 KiB, 1 worker", "ops/s", "bare boto3 loop"),
        "shead": Comparison(f"S3 HEAD {n_small} objects, 1 worker", "ops/s", "bare boto3 loop"),
        "sget": Comparison(f"S3 GET {n_small} x 64 KiB, 1 worker", "ops/s", "bare boto3 loop"),
        "sdelete": Comparison(f"S3 DELETE {n_small} objects, 1 worker", "ops/s", "bare boto3 loop"),
    }
    target = ["--target", f"s3://{bucket}/storekit", "--endpoint-url", endpoint]

    def storekit_s3() -> None:
        doc = storekit(*target, "--pattern", "shards", "--workers", str(workers), "--size", f"{n_big * 16}M",
                       "--file-size", "16M", "--block-size", "16M")  # fmt: skip
        for key, name in (("put", "write"), ("get", "read")):
            rep = phase(doc, "shards", name)
            comps[key].storekit.append(rep["bandwidth_bytes_per_s"] / 1e6)
            comps[key].storekit_cpu.append(cpu_pct(rep)[0])
            comps[key].storekit_user.append(cpu_pct(rep)[1])
        doc = storekit(*target, "--pattern", "meta", "--workers", "1", "--files", str(n_small),
                       "--small-file-size", "64k")  # fmt: skip
        for key, name in (("sput", "put"), ("shead", "head"), ("sget", "get"), ("sdelete", "delete")):
            rep = phase(doc, "meta", name, "dirs=unique")
            comps[key].storekit.append(rep["ops_per_s"])
            comps[key].storekit_cpu.append(cpu_pct(rep)[0])
            comps[key].storekit_user.append(cpu_pct(rep)[1])

    rounds = itertools.count()

    def bare_s3() -> None:
        # keys shaped like storekit's (<prefix>/scratch/<run id>/...), a fresh run id each round as
        # storekit has: the gateway indexes, hashes and signs the whole key, and a key range that
        # was just deleted is not the same as a fresh one to the OSDs' omap
        run = f"bare0000/scratch/storekit-bench-boto3-{next(rounds):09d}-{os.getpid() % 100000:05d}-0000"
        keys = [f"{run}/shards/shard_{i:05d}.bin" for i in range(n_big)]
        comps["put"].other.append(bare_loop(endpoint, bucket, "put", keys, big, workers) * big / 1e6)
        comps["get"].other.append(bare_loop(endpoint, bucket, "get", keys, big, workers) * big / 1e6)
        bare_loop(endpoint, bucket, "delete", keys, 0, workers)
        keys = [f"{run}/meta-unique/w0000/w0000.{i:08d}" for i in range(n_small)]
        for key, op in (("sput", "put"), ("shead", "head"), ("sget", "get"), ("sdelete", "delete")):
            comps[key].other.append(bare_loop(endpoint, bucket, op, keys, small, 1))

    log("S3 vs bare boto3", args.repeat)
    try:
        alternate(args.repeat, storekit_s3, bare_s3, list(comps.values()))
    finally:
        leftovers = client.list_objects_v2(Bucket=bucket).get("Contents", [])
        for obj in leftovers:
            client.delete_object(Bucket=bucket, Key=obj["Key"])
        client.delete_bucket(Bucket=bucket)
    return list(comps.values())


# -- output ---------------------------------------------------------------------------------------


def log(what: str, rounds: int) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {what}: {rounds} alternating rounds", file=sys.stderr, flush=True)


def fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def markdown(rows: list[dict[str, Any]], args: argparse.Namespace, conditions: str, command: str) -> str:
    lines = [
        "## storekit bench io vs fio",
        "",
        f"Command: `{command}`",
        "",
        conditions,
        "",
        "| comparison | unit | storekit median (spread) | peer median (spread) | peer | ratio "
        "| ratio of medians | within ±10% | storekit CPU % of a core (user) | peer CPU % |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        verdict = ("PASS" if r["pass"] else "FAIL") + ("" if r["required"] else " (extra)")
        user = f" ({fmt(r['storekit_user_pct'])})" if r["storekit_user_pct"] is not None else ""
        lines.append(
            f"| {r['name']} | {r['unit']} | {fmt(r['storekit_median'])} ({r['storekit_spread']:.0%}) | "
            f"{fmt(r['peer_median'])} ({r['peer_spread']:.0%}) | {r['peer']} | {r['ratio']:.2f} "
            f"| {r['ratio_of_medians']:.2f} | {verdict} | {fmt(r['storekit_cpu_pct'])}{user} "
            f"| {fmt(r['peer_cpu_pct'])} |"
        )
        for i, m in enumerate(r["modes"] or [], 1):
            lines.append(
                f"| ↳ mode {i} of {len(r['modes'])} | {r['unit']} | {mode_values(m['storekit_values'])} "
                f"| {mode_values(m['peer_values'])} | | {mode_ratio(m)} | {fmt_ratio(m['ratio'])} "
                f"| {'judged' if m['judged'] else 'shown'} | | |"
            )
    lines += [
        "",
        "Spread = (max - min) / median over the rounds; ratio = the median over rounds of storekit / "
        "peer in that round (the two tools alternate, which goes first swaps every round, so each "
        "round's pair shares the host's state of that minute); ratio of medians = storekit median / "
        "peer median. storekit CPU is its busiest worker process; fio's is usr+sys of its job. "
        "A comparison whose rounds form modes (a 3x jump in the pooled values) is judged per mode "
        "(↳ rows: each tool's median and rounds in that mode, the ratio of those medians, and in "
        "brackets the median ratio over rounds where both tools ran in that mode); its top row pools "
        "the modes and is not what is judged.",
    ]
    return "\n".join(lines)


def mode_values(values: list[float]) -> str:
    return f"{fmt(statistics.median(values))} ({len(values)} rounds)" if values else "- (0 rounds)"


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def mode_ratio(m: dict[str, Any]) -> str:
    paired = f" [{m['paired_ratio']:.2f} over {m['paired_rounds']}]" if m["paired_rounds"] else ""
    return fmt_ratio(m["ratio"]) + paired


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=5, help="alternating rounds per comparison")
    parser.add_argument(
        "--meta-repeat",
        type=int,
        help="rounds of the small-file comparisons (default: 3 x --repeat; a round is ~15 s, and a "
        "15 ms stat window's ratio spreads 0.7-1.5 from round to round with the host's state)",
    )
    parser.add_argument(
        "--disk-repeat",
        type=int,
        help="rounds of the sequential and random comparisons (default: 3 x --repeat; one round's "
        "ratio spreads 0.8-1.35 with the virtual disk's state, so the median of 7 still moved by "
        "+-0.14 between runs: more, shorter rounds)",
    )
    parser.add_argument(
        "--warmup", type=int, default=1, help="rounds of each pair run first and discarded (default 1)"
    )
    parser.add_argument("--dir", default="/var/tmp/sk-bench", help="a directory on the disk to measure")
    parser.add_argument(
        "--size", default="2G", help="sequential file size (2G: ~1 s at 2 GB/s, fixed costs under 2%%)"
    )
    parser.add_argument("--rand-size", default="1G", help="random-read file size")
    parser.add_argument("--rand-runtime", type=float, default=4.0, help="seconds per random-read run")
    parser.add_argument("--rand-depths", default="32,1", help="queue depths: 32 (required), 1 (extra)")
    parser.add_argument("--files", type=int, default=5000, help="small files per run")
    parser.add_argument("--s3-endpoint", default="http://127.0.0.1:7480")
    parser.add_argument("--s3-files", type=int, default=400, help="small objects per run")
    parser.add_argument("--only", default="seq,rand,meta,s3", help="comparison groups to run")
    parser.add_argument("--json-out", help="also write the raw figures here")
    args = parser.parse_args()
    args.meta_repeat = args.meta_repeat or 3 * args.repeat
    args.disk_repeat = args.disk_repeat or 3 * args.repeat
    global WARMUP
    WARMUP = args.warmup
    lock = hold_lock()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testkey")  # the dev Ceph RGW; override in the environment
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testsecret")
    version = subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()
    if version != "fio-3.33":
        print(f"warning: expected fio-3.33, found {version}", file=sys.stderr)
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    work = root / f"run-{os.getpid()}"
    work.mkdir()
    started = time.time()
    load_before = os.getloadavg()
    rows: list[dict[str, Any]] = []
    groups = {g.strip() for g in args.only.split(",")}
    sk_dir, fio_dir = work / "storekit", work / "fio"
    sk_dir.mkdir()
    fio_dir.mkdir()
    need = 2 * (parse_bytes(args.size) + parse_bytes(args.rand_size)) + (1 << 30)
    usage = shutil.disk_usage(work)
    if usage.total and usage.free < need:  # a statfs of 0 blocks (CephFS without ceph-mgr): unknown
        raise SystemExit(f"{work}: less than {need >> 30} GiB free; lower --size/--rand-size")
    mount = mount_of(str(work))
    device = Path("/sys/class/block") / os.path.basename(mount["source"]) / "stat" if mount else None
    if device is not None and device.exists():
        SETTLE_DEVICE[:] = [str(device)]
    undo_huge = reserve_huge_pages(8)
    try:
        if "seq" in groups:
            rows += [c.row() for c in seq_comparisons(args, sk_dir, fio_dir)]
        if "rand" in groups:
            rows += [c.row() for c in rand_comparisons(args, sk_dir, fio_dir)]
        if "meta" in groups:
            rows += [c.row() for c in meta_comparisons(args, sk_dir, fio_dir)]
        if "s3" in groups:
            rows += [c.row() for c in s3_comparisons(args)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if undo_huge is not None:
            undo_huge()
    load_after = os.getloadavg()
    uname = os.uname()
    timers = (
        f", storekit small files timed in {'/'.join(sorted(SMALL_FILE_TIMERS))}" if SMALL_FILE_TIMERS else ""
    )
    conditions = (
        f"Conditions: {time.strftime('%Y-%m-%d %H:%M', time.gmtime(started))} UTC, {uname.nodename}, "
        f"kernel {uname.release}, {os.cpu_count()} cores shared with teammates (load average "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after), {version}, alternating rounds: "
        f"{args.disk_repeat} sequential and random, {args.meta_repeat} small files, {args.repeat} S3, "
        f"each pair after {args.warmup} discarded, directory {args.dir} "
        f"({fs_of(args.dir)}), sequential {args.size}, random {args.rand_size} for {args.rand_runtime:g} s, "
        f"{args.files} small files, S3 at {args.s3_endpoint}, fio buffers "
        f"{'on huge pages (iomem=mmaphuge)' if FIO_IOMEM else 'on 4 KiB pages'}"
        f"{timers}{requests_note()}; "
        f"took {time.time() - started:.0f} s."
    )
    command = f"flock /tmp/storekit-bench.lock {sys.executable} benchmarks/bench_io_vs_fio.py " + " ".join(
        sys.argv[1:]
    )
    for r in rows:
        print(
            f"{r['name']:<52} storekit {fmt(r['storekit_median']):>9} ({r['storekit_spread']:4.0%})  "
            f"peer {fmt(r['peer_median']):>9} ({r['peer_spread']:4.0%})  ratio {r['ratio']:.2f} "
            f"(of medians {r['ratio_of_medians']:.2f})  "
            f"{'PASS' if r['pass'] else 'FAIL'}{'' if r['required'] else ' (extra)'}"
        )
        for i, m in enumerate(r["modes"] or [], 1):
            print(
                f"  mode {i}: storekit {mode_values(m['storekit_values'])}  "
                f"peer {mode_values(m['peer_values'])}  ratio {mode_ratio(m)}"
                + ("  (judged)" if m["judged"] else "")
            )
    print()
    print(markdown(rows, args, conditions, command.strip()))
    if args.json_out:
        raw = {"conditions": conditions, "rows": rows, "write_requests_per_mib_by_round": REQUESTS_PER_MIB}
        Path(args.json_out).write_text(json.dumps(raw, indent=2))
    if lock is not None:
        lock.close()


def requests_note() -> str:
    """Write requests per MiB in each sequential-write round: 1.0 is whole 1 MiB requests, 2.0 split."""
    if not REQUESTS_PER_MIB["storekit"]:
        return ""
    span = {k: f"{min(v):.2f}-{max(v):.2f}" for k, v in REQUESTS_PER_MIB.items() if v}
    return f", disk write requests per MiB written (storekit {span['storekit']}, fio {span.get('fio', '-')})"


def parse_bytes(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    text = text.strip().lower()
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def mount_of(path: str) -> dict[str, Any] | None:
    sys.path.insert(0, str(REPO))
    from storekit.bench.env import mount_of as find

    return find(path)


def fs_of(path: str) -> str:
    mount = mount_of(path)
    return f"{mount['fs_type']} on {mount['source']}, {mount['mount_options']}" if mount else "unknown fs"


if __name__ == "__main__":
    main()
