"""The C timer for small-file operations (storekit/bench/native.py + timed_ops.c): it builds once into
a private cache, its clock is the worker's, each operation does exactly its system calls, and every
way it can be missing falls back to Python timing with the reason."""

from __future__ import annotations

import ctypes
import errno
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from storekit import cbuild
from storekit.bench import native
from tests.conftest import IN_CI


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "cache"
    monkeypatch.setenv("STOREKIT_CACHE_DIR", str(folder))
    monkeypatch.delenv("STOREKIT_BENCH_NATIVE", raising=False)
    native.load.cache_clear()
    yield folder
    native.load.cache_clear()


@pytest.fixture
def ops(cache: Path) -> native.TimedOps:
    loaded, why = native.load()
    if loaded is None:
        if IN_CI:
            pytest.fail(f"the C timer must build in CI (scripts/test.sh installs gcc): {why}")
        pytest.skip(f"no C timer here: {why}")
    return loaded


def test_builds_once_into_a_private_cache_and_reloads_without_building(
    ops: native.TimedOps, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert ops.path == native.library_path() and ops.path.parent == cache
    assert cache.stat().st_mode & 0o777 == 0o700
    assert [p.name for p in cache.iterdir()] == [ops.path.name]  # no temporary left behind
    native.load.cache_clear()

    def no_build(*args: object) -> None:
        raise AssertionError("rebuilt a cached library")

    monkeypatch.setattr(cbuild, "build", no_build)
    again, why = native.load()
    assert again is not None and again.path == ops.path and why == ""


def test_the_source_names_the_library(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = native.library_path()
    changed = tmp_path / "timed_ops.c"
    changed.write_bytes(native.SOURCE.read_bytes() + b"\n/* changed */\n")
    monkeypatch.setattr(native, "SOURCE", changed)
    assert native.library_path() != first and native.library_path().parent == first.parent


def run_op(
    ops: native.TimedOps, name: str, path: Path, buf: object = None, size: int = 0
) -> tuple[int, int, int]:
    starts = np.full(2, -1, dtype=np.int64)
    ends = np.full(2, -1, dtype=np.int64)
    _struct, ref = ops.times(starts, ends)
    got = ops.op(name)(ref, 1, os.fsencode(path), buf, size)
    assert starts[0] == ends[0] == -1  # only the given slot is written
    return int(got), int(starts[1]), int(ends[1])


def test_each_operation_does_its_system_calls_and_times_them_on_the_workers_clock(
    ops: native.TimedOps, tmp_path: Path
) -> None:
    path, payload = tmp_path / "f", os.urandom(3000)
    before = time.perf_counter_ns()
    got, t0, t1 = run_op(ops, "create", path, payload, len(payload))
    after = time.perf_counter_ns()
    assert got == 3000 and path.read_bytes() == payload and (path.stat().st_mode & 0o777) == 0o644 & ~_umask()
    assert before <= t0 <= t1 <= after  # CLOCK_MONOTONIC is perf_counter_ns's clock

    assert run_op(ops, "create", path, payload, len(payload))[0] == -errno.EEXIST  # never overwrites
    assert path.read_bytes() == payload

    got, t0, t1 = run_op(ops, "stat", path)
    assert got == 0 and 0 < t0 <= t1

    buf = ctypes.create_string_buffer(4000)
    got, t0, t1 = run_op(ops, "readsmall", path, buf, 3001)  # one more than expected: sees the end
    assert got == 3000 and buf.raw[:3000] == payload and 0 < t0 <= t1

    got, t0, t1 = run_op(ops, "delete", path)
    assert got == 0 and not path.exists() and 0 < t0 <= t1


@pytest.mark.parametrize("name", ["stat", "readsmall", "delete"])
def test_a_failed_operation_returns_its_errno_and_records_no_time(
    ops: native.TimedOps, tmp_path: Path, name: str
) -> None:
    buf = ctypes.create_string_buffer(8)
    got, t0, t1 = run_op(ops, name, tmp_path / "missing", buf, 8)
    assert got == -errno.ENOENT and t0 == t1 == -1


def test_create_in_a_missing_directory_fails_without_a_file(ops: native.TimedOps, tmp_path: Path) -> None:
    assert run_op(ops, "create", tmp_path / "no" / "f", b"x", 1)[0] == -errno.ENOENT
    assert not (tmp_path / "no").exists()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_disabled_by_the_environment(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STOREKIT_BENCH_NATIVE", "0")
    assert native.load() == (None, "STOREKIT_BENCH_NATIVE=0")
    assert not cache.exists()


@pytest.mark.parametrize(
    ("cc", "expected"),
    [
        ("/nonexistent/cc", r"C compiler '/nonexistent/cc' did not run"),
        ("false", r"false could not compile timed_ops\.c: exit 1"),
    ],
)
def test_without_a_working_compiler_it_says_why_and_leaves_no_file(
    cache: Path, monkeypatch: pytest.MonkeyPatch, cc: str, expected: str
) -> None:
    monkeypatch.setenv("CC", cc)
    loaded, why = native.load()
    assert loaded is None
    assert re.match(expected, why), why
    assert list(cache.iterdir()) == []


def test_a_compiler_error_is_its_first_line(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not shutil.which("cc"):
        pytest.skip("no cc")
    broken = tmp_path / "timed_ops.c"
    broken.write_text("int sk_abi(void) { return ; }\nthis is not C\n")
    monkeypatch.setattr(native, "SOURCE", broken)
    loaded, why = native.load()
    assert loaded is None and "could not compile timed_ops.c: " in why and "\n" not in why
    assert list(cache.iterdir()) == []


def test_no_compiler_on_path(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(cache.parent / "empty"))
    assert native.load() == (None, "no C compiler (cc) on PATH")


def test_a_cache_others_can_write_is_refused(cache: Path) -> None:
    cache.mkdir(mode=0o700)
    cache.chmod(0o777)
    loaded, why = native.load()
    assert loaded is None and why == f"cache directory {cache} is not private to this user (owner or mode)"


def test_a_damaged_cached_library_is_built_again(ops: native.TimedOps, cache: Path) -> None:
    ops.path.unlink()  # a new file: rewriting the loaded one in place would pull it from under us
    ops.path.write_bytes(b"\x7fELF garbage")
    # a fresh process: dlopen() answers a name this process already loaded without reading the file
    probe = "from storekit.bench import native; ops, why = native.load(); print(ops.lib.sk_abi(), repr(why))"
    env = {**os.environ, "STOREKIT_CACHE_DIR": str(cache)}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == [str(native.ABI), "''"]
    assert ops.path.read_bytes()[:4] == b"\x7fELF" and ops.path.stat().st_size > 1000


def test_a_library_that_stays_wrong_is_refused(ops: native.TimedOps, monkeypatch: pytest.MonkeyPatch) -> None:
    native.load.cache_clear()
    monkeypatch.setattr(native, "ABI", native.ABI + 1)  # as if the source and its loader disagreed
    loaded, why = native.load()
    assert loaded is None and why.endswith(f": ABI {native.ABI - 1}, expected {native.ABI}")
