"""`storekit bench io` end to end on real directories (and mounts when root): what it measures,
what it leaves behind (nothing), and how it refuses bad input."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from storekit.bench.schema import validate
from tests.conftest import Ran, run_in_process, run_storekit

REPO = Path(__file__).resolve().parents[3]
SMALL = [
    "--size", "8M", "--file-size", "2M", "--block-size", "256k", "--queue-depth", "1,4",
    "--duration", "0.2", "--files", "20", "--ranks", "4", "--no-drop-caches",
]  # fmt: skip


def storekit(*args: str, timeout: float = 180, env: dict[str, str] | None = None) -> Ran:
    if env:  # settings a process reads once (STOREKIT_BENCH_NATIVE): a process of its own
        return run_storekit(args, env=env, timeout=timeout)
    return run_in_process(args)


def snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry below root with type, size, mode and mtime: equal snapshots, nothing touched.

    Only scratch/'s own mtime may change: the run directory is created in it and removed again."""
    out: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            rel = os.path.relpath(path, root)
            mtime = None if rel == "scratch" else st.st_mtime_ns
            out[rel] = (st.st_mode, 0 if os.path.isdir(path) else st.st_size, mtime)
    return out


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """A tier-like tree with data that is not the benchmark's, including in scratch/."""
    root = tmp_path / "storage"
    (root / "datasets" / "text").mkdir(parents=True)
    (root / "datasets" / "text" / "part-0.bin").write_bytes(os.urandom(10_000))
    (root / "scratch").mkdir()
    (root / "scratch" / "someone-elses.tmp").write_text("keep me")
    return root


def one_line_error(proc: Ran) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr
    assert lines and lines[0].startswith("error: "), proc.stderr
    assert len(lines) <= 2 and all(line.startswith(("error: ", "hint: ")) for line in lines), proc.stderr
    return lines[0]


def phases(doc: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for point in doc["results"]:
        for ph in point["phases"]:
            yield point, ph


@pytest.mark.slow
def test_every_pattern_runs_moves_the_planned_bytes_and_leaves_nothing_behind(
    target: Path, tmp_path: Path, promtool: Callable[[str], None]
) -> None:
    before = snapshot(target)
    prom, png = tmp_path / "bench.prom", tmp_path / "bench.png"
    proc = storekit(
        "bench", "io", "--target", str(target), "--pattern", "all", "--workers", "1,2", "--repeat", "2",
        *SMALL, "--json", "--prometheus", str(prom), "--plot", str(png),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert validate(doc) == []
    assert (
        doc["schema"] == "storekit.bench.io"
        and doc["schema_version"] == 1
        and doc["bench_schema_version"] == 1
    )
    assert {p["pattern"] for p in doc["results"]} == {"shards", "checkpoint", "tokens", "meta"}
    env = doc["environment"]
    assert env["kernel"] == os.uname().release and env["filesystem"]["fs_type"] and env["storekit_version"]
    assert env["filesystem"]["mount_options"]
    timer = "c" if shutil.which("cc") else "python"  # scripts/test.sh installs gcc
    assert env["small_file_timer"]["timer"] == timer
    assert re.fullmatch(r"[0-9a-f]{16}", doc["config_hash"])
    assert doc["parameters"]["workers"] == [1, 2] and doc["parameters"]["repeat"] == 2
    for point, ph in phases(doc):
        assert len(ph["repeats"]) == 2
        for rep in ph["repeats"]:
            if ph["planned_bytes_per_repeat"] is not None:
                assert rep["bytes"] == ph["planned_bytes_per_repeat"], (point["label"], ph["phase"])
            if ph["op"] == "randread":
                assert rep["ops"] > 0 and rep["bytes"] == rep["ops"] * 4096 * 2  # whole windows
            if ph["op"] == "write":
                assert rep["direct"] is True  # O_DIRECT works on this disk
            assert rep["latency"]["count"] > 0 and rep["elapsed_s"] > 0
            assert len(rep["stragglers"]) == rep["workers"]
            assert rep["series"] and rep["cpu"]["user_s"] >= 0
        if point["pattern"] == "meta":
            files = 20 * point["params"]["workers"]
            assert ph["summary"]["latency"]["count"] == 2 * files or ph["phase"] == "list"
    ckpt = next(ph for p, ph in phases(doc) if p["pattern"] == "checkpoint" and ph["phase"] == "write")
    assert ckpt["planned_bytes_per_repeat"] == 8 * 1024 * 1024  # 4 ranks x 2 MiB sample
    assert doc["verdict"]["checkpoint"]["save_s"] > 0 and doc["verdict"]["data"]
    assert doc["cleanup"]["leftovers"] == []
    assert snapshot(target) == before  # nothing outside scratch/ touched, everything created removed
    assert (target / "scratch" / "someone-elses.tmp").read_text() == "keep me"
    check_prometheus(prom.read_text())
    promtool(prom.read_text())
    assert prom.stat().st_mode & 0o777 == 0o644
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert not [p for p in tmp_path.iterdir() if "storekit-tmp" in p.name]


def check_prometheus(text: str) -> None:
    sample = re.compile(
        r"^(storekit_bench_io_[a-z_]+?)(?:_sum|_count)?"
        r'\{([a-z_]+="(?:[^"\\]|\\.)*"(?:,[a-z_]+="(?:[^"\\]|\\.)*")*)\} (\S+)$'
    )
    declared: set[str] = set()
    names = set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind == ("summary" if name.endswith("_latency_seconds") else "gauge")
            declared.add(name)
            continue
        m = sample.match(line)
        assert m, line
        assert m.group(1) in declared, f"{m.group(1)} has no TYPE line before it"
        float(m.group(3))
        names.add(m.group(1))
    assert {
        "storekit_bench_io_bandwidth_bytes_per_second",
        "storekit_bench_io_latency_seconds",
        "storekit_bench_io_checkpoint_save_seconds",
        "storekit_bench_io_gpus_fed",
    } <= names


def test_dry_run_prints_the_plan_and_writes_nothing(target: Path) -> None:
    before = snapshot(target)
    proc = storekit("bench", "io", "--target", str(target), "--pattern", "checkpoint", "--model", "7b",
                    "--ranks", "8", "--size", "512M", "--dry-run", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)["plan"]
    (point,) = plan["points"]
    write = point["phases"][0]
    assert write["workers"] == 8 and write["bytes"] == 512 * 1024 * 1024 and write["fsync"] is True
    assert [w["bytes"] for w in write["per_worker"]] == [64 * 1024 * 1024] * 8
    assert snapshot(target) == before
    human = storekit("bench", "io", "--target", str(target), "--dry-run")
    assert human.returncode == 0 and "nothing is written" in human.stdout
    assert snapshot(target) == before


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--block-size", "1000"], 2, "not a multiple of 4096"),
        (["--size", "0"], 2, "greater than 0"),
        (["--file-size", "1M", "--block-size", "4M"], 2, "smaller than --block-size"),
        (["--pattern", "everything"], 2, "--pattern"),
        (["--workers", "two"], 2, "--workers"),
        (["--size", "100T", "--file-size", "1G"], 6, "free"),
    ],
)
def test_bad_input_is_one_line_and_an_exit_code_and_writes_nothing(
    target: Path, args: list[str], code: int, message: str
) -> None:
    before = snapshot(target)
    proc = storekit("bench", "io", "--target", str(target), *args)
    assert proc.returncode == code, proc.stderr
    assert message in one_line_error(proc)
    assert snapshot(target) == before


def test_missing_targets_and_tiers_are_not_found(tmp_path: Path) -> None:
    for args in (["--target", str(tmp_path / "nope")], ["--tier", "nope"]):
        proc = storekit("bench", "io", *args, "--json")
        assert proc.returncode == 3, proc.stderr
        one_line_error(proc)
        assert json.loads(proc.stdout)["error"]["exit_code"] == 3
    proc = storekit("bench", "io", "--target", "ftp://host/x")
    assert proc.returncode == 2 and "--target" in one_line_error(proc)
    proc = storekit("bench", "io", "--target", str(tmp_path), "--endpoint-url", "http://x:1")
    assert proc.returncode == 2 and "s3://" in one_line_error(proc)


def test_a_tier_from_the_site_config_is_benchmarked(tmp_path: Path) -> None:
    root = tmp_path / "nvme"
    root.mkdir()
    config = tmp_path / "storekit.toml"
    config.write_text(f'[tiers.nvme]\nurl = "{root}"\nrole = "burst"\n')
    proc = storekit(
        "bench",
        "io",
        "--config",
        str(config),
        "--tier",
        "nvme",
        "--pattern",
        "meta",
        "--workers",
        "1",
        "--repeat",
        "1",
        "--files",
        "10",
        "--no-drop-caches",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["environment"]["target"] == str(root)
    assert list(root.iterdir()) == []  # scratch/ was created by the run and removed again


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_a_run_stops_workers_removes_scratch_and_exits_130(target: Path, sig: int) -> None:
    before = snapshot(target)
    # the signal arrives while the random-read workers run: a fault point, not a sleep, says when
    name = {signal.SIGINT: "int", signal.SIGTERM: "term"}[sig]
    proc = run_storekit(
        ["bench", "io", "--target", str(target), "--pattern", "tokens",
         "--workers", "2", "--queue-depth", "4", "--duration", "30", "--repeat", "1", "--size", "8M",
         "--file-size", "2M", "--no-drop-caches", "-q"],
        cwd=REPO, timeout=300, env={"STOREKIT_FAULTS": f"bench.randread.started={name}"},
    )  # fmt: skip
    assert proc.returncode == 130, proc.stderr
    assert "interrupted" in proc.stderr and "Traceback" not in proc.stderr
    assert snapshot(target) == before


# -- mounts (root only): writes outside scratch/, unwritable targets, small and O_DIRECT-less filesystems


def mount(*args: str) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount here ({proc.stderr.strip()})")


@pytest.fixture
def mounts() -> Iterator[list[Path]]:
    if os.geteuid() != 0:
        pytest.skip("mount tests need root")
    made: list[Path] = []
    yield made
    for path in reversed(made):
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_writes_only_under_scratch_even_when_everything_else_is_read_only(
    target: Path, tmp_path: Path, mounts: list[Path]
) -> None:
    view = tmp_path / "view"
    view.mkdir()
    mount("--bind", str(target), str(view))
    mounts.append(view)
    mount("-o", "remount,bind,ro", str(view))
    mount("--bind", str(target / "scratch"), str(view / "scratch"))  # only scratch/ stays writable
    mounts.append(view / "scratch")
    before = snapshot(target)
    proc = storekit(
        "bench",
        "io",
        "--target",
        str(view),
        "--pattern",
        "shards,checkpoint,meta",
        "--workers",
        "2",
        "--repeat",
        "1",
        *SMALL,
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    assert snapshot(target) == before
    subprocess.run(["umount", str(view / "scratch")], check=True)
    mounts.remove(view / "scratch")
    proc = storekit("bench", "io", "--target", str(view), "--pattern", "meta", "--files", "5")
    assert proc.returncode == 1 and "not writable" in one_line_error(proc)


def test_without_the_c_timer_small_files_are_timed_in_python_and_the_run_says_so(target: Path) -> None:
    before = snapshot(target)
    args = ["--pattern", "meta", "--workers", "1", "--repeat", "1", "--files", "30", "--json"]
    proc = storekit("bench", "io", "--target", str(target), *args, env={"STOREKIT_BENCH_NATIVE": "0"})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert validate(doc) == []
    note = (
        "small-file operations timed in Python (STOREKIT_BENCH_NATIVE=0): each latency includes ~0.5 us "
        "of interpreter, which shows only where an operation takes a few us (page-cached metadata)"
    )
    assert doc["environment"]["small_file_timer"] == {"timer": "python", "reason": "STOREKIT_BENCH_NATIVE=0"}
    assert note in doc["warnings"]
    for _, ph in phases(doc):
        assert ph["repeats"][0]["notes"] == [note] and ph["summary"]["latency"]["count"] == 30
    assert snapshot(target) == before


def test_refuses_before_writing_when_the_filesystem_is_too_small(tmp_path: Path, mounts: list[Path]) -> None:
    small = tmp_path / "small"
    small.mkdir()
    mount("-t", "tmpfs", "-o", "size=16m", "tmpfs", str(small))
    mounts.append(small)
    proc = storekit("bench", "io", "--target", str(small), "--pattern", "shards", "--size", "64M",
                    "--file-size", "8M")  # fmt: skip
    assert proc.returncode == 6, proc.stderr
    assert "free" in one_line_error(proc)
    assert list(small.iterdir()) == []


def test_a_filesystem_that_refuses_o_direct_is_reported_not_hidden(
    tmp_path: Path, mounts: list[Path]
) -> None:
    ram = tmp_path / "ram"
    ram.mkdir()
    mount("-t", "ramfs", "ramfs", str(ram))
    mounts.append(ram)
    proc = storekit(
        "bench",
        "io",
        "--target",
        str(ram),
        "--pattern",
        "shards",
        "--workers",
        "1",
        "--repeat",
        "1",
        *SMALL,
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    direct = doc["honesty"]["direct"]
    assert direct["requested"] is True and direct["effective"] is False and "refused" in direct["reason"]
    assert all(rep["direct"] is False for _, ph in phases(doc) for rep in ph["repeats"])
    warnings = " ".join(doc["warnings"])
    assert "memory-backed" in warnings and "O_DIRECT" in warnings and "page cache can hold" in warnings
    assert list(ram.iterdir()) == []


def test_running_out_of_space_mid_run_is_exit_6_and_cleans_up(tmp_path: Path, mounts: list[Path]) -> None:
    small = tmp_path / "few-inodes"
    small.mkdir()
    mount("-t", "tmpfs", "-o", "size=256m,nr_inodes=60", "tmpfs", str(small))  # bytes fit, inodes do not
    mounts.append(small)
    proc = storekit("bench", "io", "--target", str(small), "--pattern", "meta", "--workers", "1",
                    "--files", "200", "--repeat", "1", "--no-drop-caches", "-q")  # fmt: skip
    assert proc.returncode == 6, proc.stderr
    assert "out of space" in one_line_error(proc)
    assert list(small.iterdir()) == []
