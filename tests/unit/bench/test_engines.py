"""The POSIX engines against real files: io_uring reads the right bytes, writes are stamped and exact."""

from __future__ import annotations

import os
import struct
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from storekit.bench import engine_posix, native, uring, uring_loop
from storekit.bench.engine_posix import O_DIRECT, RandRead, SeqRead, SeqWrite
from storekit.bench.iobuf import IOBuffer
from storekit.bench.plan import PhasePlan, WorkerTask
from storekit.bench.recorder import Recorder
from storekit.bench.runner import PhaseRunner, WorkerFailed
from storekit.bench.spec import TargetSpec
from storekit.bench.stats import FINE_NS
from storekit.bench.worker import run_worker
from tests.conftest import IN_CI

KiB = 1024


def task(root: Path, op: str, **kw: object) -> WorkerTask:
    target = TargetSpec(kind="posix", root=str(root))
    return WorkerTask(worker=0, op=op, target=target, run_root=str(root), **kw)  # type: ignore[arg-type]


def test_io_uring_reads_exactly_the_requested_blocks(tmp_path: Path) -> None:
    ok, why = uring.available()
    if not ok:
        pytest.skip(f"io_uring unavailable here: {why}")
    data = np.random.default_rng(0).integers(0, 256, 1024 * KiB, dtype=np.uint8).tobytes()
    path = tmp_path / "data.bin"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    ring = uring.Ring(8)
    buf = IOBuffer(8 * 4 * KiB, 1)
    try:
        offsets = [0, 7, 100, 255, 3, 64, 128, 200]
        ring.own_reads(8, fd, buf.address, 4096, 4096)
        tail = ring.sq32[ring.sq_tail_at]
        for slot in (5, 2, 7, 0, 1, 6, 3, 4):  # queued out of order: completions come back by tag
            ring.sqe64[slot * uring.SQE_U64 + uring.SQE_OFF] = offsets[slot] * 4096
            ring.sq32[ring.sq_array_at + (tail & ring.sq_mask)] = slot
            tail = (tail + 1) & uring.U32
        ring.sq32[ring.sq_tail_at] = tail
        ring.push(8, 0)
        seen: dict[int, int] = {}
        head = ring.cq32[ring.cq_head_at]
        while len(seen) < 8:
            if ring.cq32[ring.cq_tail_at] == head:
                assert ring.enter_raw(0, 1, uring.IORING_ENTER_GETEVENTS) >= 0
                continue
            i = head & ring.cq_mask
            slot = ring.cqe64[ring.cqe64_at + uring.CQE_U64 * i]
            seen[slot] = ring.cqe32i[ring.cqe32i_at + uring.CQE_U32 * i + uring.CQE_RES]
            head = (head + 1) & uring.U32
        ring.cq32[ring.cq_head_at] = head
        assert seen == dict.fromkeys(range(8), 4096)
        for slot, off in enumerate(offsets):
            assert buf.view[slot * 4096 : (slot + 1) * 4096] == data[off * 4096 : (off + 1) * 4096]
    finally:
        ring.close()
        buf.close()
        os.close(fd)


def test_seq_write_writes_exact_sizes_stamping_every_4k_then_reads_them(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    files = ("d/a.bin", "d/b.bin")
    w = task(
        tmp_path,
        "write",
        files=files,
        file_size=256 * KiB,
        block_size=64 * KiB,
        direct=True,
        fsync=True,
        seed=3,
    )
    job = SeqWrite(w)
    rec = Recorder()
    job.run(rec)
    job.close()
    assert rec.bytes == 2 * 256 * KiB and rec.ops == 8
    assert job.direct is bool(O_DIRECT)
    pages = []
    for index, name in enumerate(files):
        data = (tmp_path / name).read_bytes()
        assert len(data) == 256 * KiB
        # every 4 KiB carries (file stamp, its own byte offset): no two pages alike, within a block or
        # across blocks and files, so deduplication in the storage has nothing to fold
        stamps = [struct.unpack_from("<QQ", data, off) for off in range(0, len(data), 4 * KiB)]
        assert stamps == [(3 * 65_536 + index, off) for off in range(0, 256 * KiB, 4 * KiB)]
        pages += [data[off : off + 4 * KiB] for off in range(0, len(data), 4 * KiB)]
    assert len(set(pages)) == len(pages)
    r = SeqRead(task(tmp_path, "read", files=files, file_size=256 * KiB, block_size=64 * KiB, direct=True))
    rec = Recorder()
    r.run(rec)
    r.close()
    assert rec.bytes == 2 * 256 * KiB and rec.latency.count == 8


def test_seq_write_stamps_blocks_that_are_not_whole_pages(tmp_path: Path) -> None:
    # buffered I/O allows any block size: a 6,000-byte block is stamped at 0 and 4,096
    job = SeqWrite(task(tmp_path, "write", files=("odd.bin",), file_size=12_000, block_size=6_000, seed=1))
    job.run(Recorder())
    job.close()
    data = (tmp_path / "odd.bin").read_bytes()
    assert len(data) == 12_000
    stamps = [struct.unpack_from("<QQ", data, off) for off in (0, 4096, 6000, 10096)]
    assert stamps == [(65_536, 0), (65_536, 4096), (65_536, 6000), (65_536, 10096)]


def test_seq_write_creates_its_files_before_the_timed_run_like_fios_layout(tmp_path: Path) -> None:
    """Creating the files is not part of the window: they exist, empty, once the job is prepared
    (before the start barrier), and the timed run only opens them: a file gone by then fails it."""
    t = task(tmp_path, "write", files=("a.bin", "b.bin"), file_size=8 * KiB, block_size=4 * KiB, seed=0)
    job = engine_posix.prepare(t)
    try:
        assert [(tmp_path / n).stat().st_size for n in ("a.bin", "b.bin")] == [0, 0]
        assert job.settle_s >= 0.0  # the filesystem was synced before the barrier
        (tmp_path / "b.bin").unlink()
        rec = Recorder()
        with pytest.raises(OSError, match=r"b\.bin: No such file"):
            job.run(rec)
    finally:
        job.close()
    assert (tmp_path / "a.bin").stat().st_size == 8 * KiB and rec.bytes == 8 * KiB
    assert not (tmp_path / "b.bin").exists()


def test_seq_write_never_overwrites_an_existing_file(tmp_path: Path) -> None:
    (tmp_path / "taken.bin").write_bytes(b"not yours")
    with pytest.raises(OSError, match=r"taken\.bin"):
        SeqWrite(task(tmp_path, "write", files=("taken.bin",), file_size=4096, block_size=4096, seed=0))
    assert (tmp_path / "taken.bin").read_bytes() == b"not yours"


@pytest.fixture(params=["c", "python"])
def uring_driver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Queue-depth reads driven by the compiled loop, or by the Python loop it falls back to."""
    if request.param == "python":
        monkeypatch.setattr(uring_loop, "loop_function", lambda: (None, "no compiler (test)"))
    elif uring_loop.loop_function()[0] is None:
        pytest.skip("no compiled loop here: " + uring_loop.loop_function()[1])
    return str(request.param)


@pytest.mark.parametrize("qd", [1, 8])
def test_random_window_reads_count_whole_aligned_windows(tmp_path: Path, qd: int, uring_driver: str) -> None:
    (tmp_path / "s.bin").write_bytes(os.urandom(2048 * KiB))
    t = task(
        tmp_path,
        "randread",
        files=("s.bin",),
        file_size=2048 * KiB,
        window=6000,
        queue_depth=qd,
        duration=0.2,
        direct=True,
        seed=1,
    )
    job = RandRead(t)
    rec = Recorder()
    job.run(rec)
    job.close()
    assert job.engine == ("psync" if qd == 1 else ("io_uring" if uring.available()[0] else "threads"))
    if qd > 1 and job.engine == "io_uring":
        assert (uring_driver == "python") == any("driven from Python" in n for n in job.notes)
        assert sum(rec.trace.bytes) == rec.bytes and sum(rec.trace.ops) == rec.ops
    assert rec.ops > 10
    if job.direct:  # a 6000-byte window is read as the 4 KiB-aligned range covering it: 8 or 12 KiB
        assert rec.bytes % 4096 == 0 and 8192 * rec.ops <= rec.bytes <= 12288 * rec.ops
    else:
        assert rec.bytes == 6000 * rec.ops
    assert rec.latency.count == rec.ops


def test_a_worker_waits_on_the_barrier_and_returns_plain_data(tmp_path: Path) -> None:
    (tmp_path / "s.bin").write_bytes(os.urandom(64 * KiB))
    barrier = threading.Barrier(1)
    out = run_worker(
        task(tmp_path, "read", files=("s.bin",), file_size=64 * KiB, block_size=16 * KiB), barrier
    )
    assert out["bytes"] == 64 * KiB and out["ops"] == 4 and out["op"] == "read"
    assert out["end_ns"] > out["start_ns"] and out["cpu_user_s"] >= 0


def test_a_failing_worker_fails_the_phase_with_the_file_named(tmp_path: Path) -> None:
    (tmp_path / "ok.bin").write_bytes(os.urandom(64 * KiB))
    tasks = tuple(
        WorkerTask(
            worker=i,
            op="read",
            target=TargetSpec(kind="posix", root=str(tmp_path)),
            run_root=str(tmp_path),
            files=(name,),
            file_size=64 * KiB,
            block_size=16 * KiB,
        )
        for i, name in enumerate(["ok.bin", "missing.bin"])
    )
    with pytest.raises(WorkerFailed, match=r"missing\.bin"):
        PhaseRunner().run(PhasePlan(name="read", op="read", tasks=tasks), 0)


def test_without_io_uring_a_queue_depth_runs_on_threads_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(entries: int) -> None:
        raise OSError(1, "io_uring_setup: Operation not permitted")

    monkeypatch.setattr(uring, "Ring", refuse)  # as under a seccomp profile that blocks io_uring
    (tmp_path / "s.bin").write_bytes(os.urandom(1024 * KiB))
    t = task(tmp_path, "randread", files=("s.bin",), file_size=1024 * KiB, window=4096, queue_depth=4,
             duration=0.2, direct=True, seed=2)  # fmt: skip
    job = RandRead(t)
    rec = Recorder()
    job.run(rec)
    job.close()
    assert job.engine == "threads" and "io_uring unavailable" in job.notes[0]
    assert rec.ops > 10 and rec.bytes == 4096 * rec.ops and rec.latency.count == rec.ops


@pytest.mark.parametrize("short", [0, 1])
def test_io_uring_requests_reach_every_file(tmp_path: Path, short: int, uring_driver: str) -> None:
    """Each resubmission rewrites its entry's fd: a file too short for the plan must fail the run."""
    if not uring.available()[0]:
        pytest.skip("io_uring unavailable here")
    names = ("a.bin", "b.bin")
    for i, name in enumerate(names):
        (tmp_path / name).write_bytes(os.urandom(64 * KiB if i == short else 1024 * KiB))
    t = task(tmp_path, "randread", files=names, file_size=1024 * KiB, window=4096, queue_depth=8,
             duration=2.0, direct=True, seed=4)  # fmt: skip
    job = RandRead(t)
    try:
        with pytest.raises(OSError, match=rf"{names[short]}: read at \d+: short read \(0 bytes\)"):
            job.run(Recorder())
    finally:
        job.close()


@pytest.mark.parametrize("timer", ["c", "python", "python-os-stat"])
def test_meta_ops_time_every_file_and_name_the_one_that_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, timer: str
) -> None:
    if timer == "c":
        ops, why = native.load()
        if ops is None:
            if IN_CI:
                pytest.fail(f"the C timer must build in CI: {why}")
            pytest.skip(why)
    else:
        monkeypatch.setattr(native, "load", lambda: (None, "no compiler (test)"))
    if timer == "python-os-stat":  # as on a libc that does not export stat(): os.stat does the work
        monkeypatch.setattr(engine_posix, "libc_stat", lambda: None)
    (tmp_path / "m").mkdir()

    notes: list[str] = []

    def run(op: str, count: int = 50) -> Recorder:
        t = task(tmp_path, op, file_size=100, meta_dir="m", meta_owner=3, meta_count=count, seed=5)
        job = engine_posix.prepare(t)
        notes[:] = job.notes
        rec = Recorder()
        try:
            job.run(rec)
        finally:
            job.close()
        return rec

    t0 = time.perf_counter_ns()
    created = run("create")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == [f"w0003.{i:08d}" for i in range(50)]
    assert all(p.stat().st_size == 100 for p in (tmp_path / "m").iterdir())
    assert created.ops == created.latency.count == 50 and created.bytes == 5000
    assert 0 < created.latency.min_ns <= created.latency.max_ns < time.perf_counter_ns() - t0
    # completions land on the wall clock within the run: the C clock is the worker's clock
    trace, first, last = created.trace, (t0 + created.wall_offset) // FINE_NS, time.time_ns() // FINE_NS
    assert sum(trace.ops) == 50 and first <= trace.origin and trace.origin + len(trace.ops) - 1 <= last
    expected_note = [] if timer == "c" else [native.python_timing_note("no compiler (test)")]
    assert notes == expected_note
    stat = run("stat")
    assert stat.ops == stat.latency.count == 50 and stat.bytes == 0
    read = run("readsmall")
    assert read.ops == 50 and read.bytes == 5000
    (tmp_path / "m" / "w0003.00000007").write_bytes(b"x" * 101)
    with pytest.raises(OSError, match=r"readsmall .*/m/w0003\.00000007: expected 100 bytes, got 101"):
        run("readsmall")
    (tmp_path / "m" / "w0003.00000031").unlink()
    with pytest.raises(OSError, match=r"stat .*/m/w0003\.00000031: No such file or directory"):
        run("stat")
    assert run("delete", 31).ops == 31
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == [f"w0003.{i:08d}" for i in range(32, 50)]
