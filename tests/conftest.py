"""Shared fixtures: local tiers in tmp dirs, and the real Ceph RGW / Slurm started by scripts/test.sh.

Service contract (set by scripts/test.sh from the services it started, or by hand for a dev instance):
  STOREKIT_TEST_S3_ENDPOINT, STOREKIT_TEST_S3_KEY, STOREKIT_TEST_S3_SECRET  -> Ceph RGW
  STOREKIT_TEST_SLURM=1                                                     -> a Slurm cluster is up
  STOREKIT_TEST_CEPHFS_MOUNT1, _MOUNT2 (one CephFS mounted twice), _DIR     -> CephFS (two "nodes")
Outside CI a missing service skips the test with a one-line reason; with CI=true it fails.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from storekit.config import TierConfig
from storekit.store import Store, open_store

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
REPO = Path(__file__).resolve().parents[1]
# children the tests start without storekit_env (bench io's forkserver, started by whichever in-process
# run comes first) import this checkout too, not the copy a venv's editable install names (a worktree)
os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
# a suite started in the background of a script (`cmd &`, nohup) inherits SIGINT ignored, and every
# command it starts would too: the Ctrl-C tests would wait for an interrupt that never comes
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def storekit_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a `storekit` subprocess runs in: this checkout's code, and no site config or
    fault points from the caller's shell (STOREKIT_CONFIG / STOREKIT_FAULTS only where the test sets
    them)."""
    full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    for name in ("STOREKIT_CONFIG", "STOREKIT_FAULTS"):
        if not env or name not in env:
            full.pop(name, None)
    return full


# -- the CLI runner of the suite: in this process (fast), or a subprocess (kills, signals, env) ---
@dataclass
class Ran:
    """What one `storekit ...` did: exit code (negative: killed by that signal), stdout, stderr."""

    code: int
    stdout: str
    stderr: str

    @property
    def returncode(self) -> int:
        return self.code

    def json(self) -> Any:
        return json.loads(self.stdout)  # fails unless stdout is exactly one JSON document


_TREES: dict[tuple[Any, ...], Any] = {}


def _build_each_tree_once() -> None:
    """Typer makes the Click tree again from the command functions' annotations on every main():
    ~75 ms, most of an in-process run (a real `storekit` process builds it once too). The suite's
    runs build each tree once per test process: a tree holds nothing of a run (Click gives each
    run a new Context; tidy_options finds a tidied tree tidy). main() looks both names up per call."""
    import storekit.cli.app as cli_app

    build, command_of = getattr(cli_app, "build_app", None), getattr(cli_app, "get_command", None)
    if build is None or command_of is None or getattr(build, "built_once", False):
        return  # done already, or a CLI that no longer builds its tree in main(): nothing to cache

    def build_app(*modules: Any) -> Any:
        key = ("app", *(tuple(m) for m in modules))
        if key not in _TREES:
            _TREES[key] = build(*modules)
        return _TREES[key]

    def get_command(typer_app: Any) -> Any:
        key = ("command", id(typer_app))  # the apps are kept in _TREES: an id is never reused
        if key not in _TREES:
            _TREES[key] = (typer_app, command_of(typer_app))
        return _TREES[key][1]

    build_app.built_once = True  # type: ignore[attr-defined]
    cli_app.build_app = build_app  # type: ignore[assignment]
    cli_app.get_command = get_command


def run_cli(args: Sequence[str], capsys: Any = None) -> Ran:
    """`storekit ARGS` in this process; output through `capsys`, or captured here without it (a CLI
    run inside another run's fault point). Signal handlers the CLI installs are put back."""
    from storekit.cli.app import main

    _build_each_tree_once()
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)}
    out, err = io.StringIO(), io.StringIO()
    if capsys is not None:
        capsys.readouterr()
    try:
        with contextlib.ExitStack() as stack:
            if capsys is None:
                stack.enter_context(contextlib.redirect_stdout(out))
                stack.enter_context(contextlib.redirect_stderr(err))
            main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        if threading.current_thread() is threading.main_thread():  # a task thread installs none
            for s, h in saved.items():
                signal.signal(s, h)
    if capsys is not None:
        captured = capsys.readouterr()
        return Ran(code, captured.out, captured.err)
    return Ran(code, out.getvalue(), err.getvalue())


def run_in_process(
    args: Sequence[str], *, cwd: Path = REPO, env: Mapping[str, str] | None = None, timeout: float = 180
) -> Ran:
    """run_storekit's call, in this process (run_cli): for tests of what a command does, not of the
    process it runs in (signals, kills, a real exit status, inherited env). cwd and the environment
    run_storekit would give (storekit_env, COLUMNS=80 unless `env` sets it) hold for the run and are
    put back after it, whatever it changed. `timeout` is accepted for the same call and not used."""
    del timeout
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    try:
        full = storekit_env({"COLUMNS": "80", **(env or {})})
        os.environ.clear()
        os.environ.update(full)
        os.chdir(cwd)
        return run_cli(args)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


def start_storekit(
    args: Sequence[str], *, cwd: Path = REPO, env: Mapping[str, str] | None = None, **popen: Any
) -> subprocess.Popen[str]:
    """`python -m storekit ARGS` started in a subprocess (for tests that signal or kill it)."""
    return subprocess.Popen(
        [sys.executable, "-m", "storekit", *args],
        cwd=cwd,
        env=storekit_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def wait_reached(faults: Path, proc: subprocess.Popen[str], *names: str) -> None:
    """Wait until `proc` has reached every fault point in `names` (each writes NAME.reached in the
    fault dir and waits for NAME.go). The 120 s bound is for a loaded host, not a timing assumption;
    `proc` ending first fails the test with its stderr."""
    deadline = time.monotonic() + 120
    while not all((faults / f"{name}.reached").exists() for name in names):
        if proc.poll() is not None:
            _out, err = proc.communicate()
            pytest.fail(f"the command ended (exit {proc.returncode}) before {', '.join(names)}: {err}")
        if time.monotonic() > deadline:
            pytest.fail(f"the command never reached {', '.join(names)}")
        time.sleep(0.05)


def run_storekit(
    args: Sequence[str], *, cwd: Path = REPO, env: Mapping[str, str] | None = None, timeout: float = 180
) -> Ran:
    """`python -m storekit ARGS` in a subprocess, to the end; output captured."""
    proc = start_storekit(args, cwd=cwd, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return Ran(proc.returncode, out, err)


@pytest.fixture
def sk(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., Ran]:
    """`sk(cwd, *args)`: `storekit ARGS` in this process (run_cli), in `cwd`, at 80 columns, with no
    site config or fault points from the caller's shell. The fixture is what sets cwd and env back;
    run_cli stays a function for a CLI run inside another run's fault point, run_storekit and
    start_storekit for runs that are killed, signalled or need their own environment."""

    def run(cwd: Path, *args: str) -> Ran:
        monkeypatch.chdir(cwd)
        monkeypatch.setenv("COLUMNS", "80")
        monkeypatch.delenv("STOREKIT_CONFIG", raising=False)
        monkeypatch.delenv("STOREKIT_FAULTS", raising=False)
        return run_cli(args, capsys)

    return run


# -- parallel runs (pytest-xdist, --dist loadgroup): who must not run beside whom -----------------
# The tests of one shared service run one after another on one worker, beside everything else:
# Slurm's tests fill the four test nodes, preempt through `urgent` (a requeue of whatever else runs
# there) and time their jobs; CephFS's stop the one MDS (SIGSTOP), which hangs every other user of
# the two mounts. Ceph RGW's take a fresh bucket or prefix and a private gateway on a free port, and
# every other test works under its own tmp_path: those run anywhere.
EXCLUSIVE = {"slurm": {"slurm_cluster"}, "cephfs": {"cephfs", "cephfs_mounts"}}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        groups = [g for g, uses in EXCLUSIVE.items() if item.get_closest_marker(g) or fixtures & uses]
        if len(groups) > 1:  # one xdist group cannot keep a test apart from two others
            raise pytest.UsageError(f"{item.nodeid} needs {' and '.join(groups)}: split it")
        if groups:
            item.add_marker(pytest.mark.xdist_group(groups[0]))
            if getattr(config.option, "loadgroup", False):  # an xdist worker of a --dist loadgroup run
                _group_in_nodeid(item, groups[0])
    if hasattr(config, "workerinput"):  # an xdist worker (each sorts alike): the long tests go first,
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # none is left for last


def _group_in_nodeid(item: pytest.Item, group: str) -> None:
    """loadgroup finds a test's group after an '@' in its nodeid, which xdist 3.8 writes to
    item._nodeid; pytest 9.2 reads the nodeid from item._id, so xdist's write is lost and every
    test ran anywhere. Written here the way pytest keeps it (nothing to do where xdist's works)."""
    nodeid = f"{item.nodeid}@{group}"
    if hasattr(item, "_id") and not item.nodeid.endswith(f"@{group}"):
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(nodeid)


def _need(what: str) -> None:
    if IN_CI:
        pytest.fail(f"{what} is required in CI but not available (scripts/test.sh should start it)")
    pytest.skip(f"{what} not available; run scripts/test.sh or start scripts/services/*-up.sh")


def s3_options() -> dict[str, str]:
    endpoint = os.environ.get("STOREKIT_TEST_S3_ENDPOINT")
    if not endpoint:
        _need("Ceph RGW (STOREKIT_TEST_S3_ENDPOINT)")
    return {
        "endpoint_url": str(endpoint),
        "key": os.environ.get("STOREKIT_TEST_S3_KEY", "testkey"),
        "secret": os.environ.get("STOREKIT_TEST_S3_SECRET", "testsecret"),
    }


@pytest.fixture
def local_tier(tmp_path: Path) -> TierConfig:
    root = tmp_path / "storage"
    return TierConfig(name="local", url=root.as_uri(), role="plain")


@pytest.fixture
def local_store(local_tier: TierConfig) -> Store:
    store = open_store(local_tier)
    store.makedirs("")
    return store


@pytest.fixture
def s3_tier() -> Iterator[TierConfig]:
    """A tier on a fresh bucket of the real Ceph RGW; the bucket is removed afterwards."""
    options = s3_options()
    bucket = f"sk-test-{uuid.uuid4().hex[:12]}"
    tier = TierConfig(name="archive", url=f"s3://{bucket}/storage", role="archive", options=options)
    store = open_store(tier)
    store.makedirs("")
    yield tier
    try:
        remove_bucket(store, bucket)
    except Exception as exc:  # cleanup must not hide the test's own result
        print(f"warning: could not remove bucket {bucket}: {exc}")


def remove_bucket(store: Store, bucket: str, prefix: str = "") -> None:
    """Every object (and unfinished upload) under `prefix` of `bucket` removed; with no prefix, the
    bucket too. Through the S3 store's own client; a missing bucket is fine."""
    client = store.client  # type: ignore[attr-defined]
    try:
        uploads = client.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", [])
    except Exception as exc:
        if "NoSuchBucket" in str(exc):
            return
        raise
    for up in uploads:
        client.abort_multipart_upload(Bucket=bucket, Key=up["Key"], UploadId=up["UploadId"])
    # every version and delete marker (a test may have turned versioning on)
    for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        found = page.get("Versions", []) + page.get("DeleteMarkers", [])
        keys = [{"Key": o["Key"], "VersionId": o["VersionId"]} for o in found]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
    if not prefix:
        client.delete_bucket(Bucket=bucket)


@pytest.fixture
def s3_store(s3_tier: TierConfig) -> Store:
    return open_store(s3_tier)


@dataclass(frozen=True)
class TwoMounts:
    """One fresh directory of the real CephFS as two nodes see it: `one` through the first ceph-fuse
    mount (client.admin), `two` through the second (another client). `mds_pid_file`: the MDS's pid."""

    one: Path
    two: Path
    mds_pid_file: Path


@pytest.fixture(scope="session")
def cephfs_mounts() -> tuple[Path, Path, Path]:
    m1, m2 = os.environ.get("STOREKIT_TEST_CEPHFS_MOUNT1"), os.environ.get("STOREKIT_TEST_CEPHFS_MOUNT2")
    if not m1 or not m2 or not os.path.ismount(m1) or not os.path.ismount(m2):
        _need("CephFS (STOREKIT_TEST_CEPHFS_MOUNT1/2, scripts/services/cephfs-up.sh)")
    state = Path(os.environ.get("STOREKIT_TEST_CEPHFS_DIR", str(Path(str(m1)).parent)))
    return Path(str(m1)), Path(str(m2)), state / "pids" / "mds.pid"


@pytest.fixture
def cephfs(cephfs_mounts: tuple[Path, Path, Path]) -> Iterator[TwoMounts]:
    """A fresh directory on the real CephFS, seen from both mounts; removed afterwards."""
    m1, m2, mds = cephfs_mounts
    name = f"t-{uuid.uuid4().hex[:12]}"
    (m1 / name).mkdir()
    yield TwoMounts(m1 / name, m2 / name, mds)
    shutil.rmtree(m1 / name, ignore_errors=True)


@pytest.fixture
def slurm_cluster() -> None:
    if os.environ.get("STOREKIT_TEST_SLURM") != "1":
        _need("Slurm (STOREKIT_TEST_SLURM=1)")


@pytest.fixture(scope="session", autouse=True)
def _private_build_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """storekit's compiled helpers (bench io's C timer) build into a cache: the session's own, not ~."""
    old = os.environ.get("STOREKIT_CACHE_DIR")
    os.environ["STOREKIT_CACHE_DIR"] = str(tmp_path_factory.mktemp("storekit-cache"))
    yield
    if old is None:
        os.environ.pop("STOREKIT_CACHE_DIR", None)
    else:
        os.environ["STOREKIT_CACHE_DIR"] = old


@pytest.fixture(scope="session", autouse=True)
def _private_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The user's key (trusted_dirs.user_key) goes into the session's own state dir, not ~."""
    old = os.environ.get("STOREKIT_STATE_DIR")
    os.environ["STOREKIT_STATE_DIR"] = str(tmp_path_factory.mktemp("storekit-state") / "state")
    yield
    if old is None:
        os.environ.pop("STOREKIT_STATE_DIR", None)
    else:
        os.environ["STOREKIT_STATE_DIR"] = old


@pytest.fixture
def promtool() -> Callable[[str], None]:
    """`check(text)`: the real `promtool check metrics` (Debian package prometheus) must accept text."""
    exe = shutil.which("promtool")
    if exe is None:
        _need("promtool (Debian package prometheus)")

    def check(text: str) -> None:
        proc = subprocess.run(
            [str(exe), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
        )
        problems = (proc.stdout + proc.stderr).strip()
        assert proc.returncode == 0 and not problems, problems

    return check
