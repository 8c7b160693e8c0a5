"""--quiet means errors only, on stderr, for every command: stdout stays empty unless the output is the
answer asked for (a path, a listing), and a command that ends in failure says why in an `error:` line
even though its report was left out: cron mails it and a Slurm epilog's log keeps it, so nothing
fails silently (`storekit --config F tier --drain --quiet || true` included). Without --quiet, every
command's report into a pipe is whole lines, with no padding at their ends."""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.core import TyperGroup
from typer.main import get_command

from storekit import faults
from storekit.checkpoint import commit
from storekit.cli.app import build_app
from storekit.cli.common import Command
from storekit.cli.output import ANSWERS
from storekit.config import load_config
from storekit.tier.mover import drain_unit
from storekit.tier.moveunit import journal_dir_for
from tests.conftest import Ran, run_in_process
from tests.unit.jobs import echo_job
from tests.unit.pipeline.helpers import TOKENIZER
from tests.unit.tier.conftest import dcp_unit, make_site

DATASET = "datasets/text/q/v1"
PREPARE = ["prepare", "dataset", "-i", "corpus.jsonl", "--tokenizer", TOKENIZER, "--name", "q"]
# commands this test does not run, and why
NOT_RUN = {"jobs rerun": "resubmits a Slurm array: tests/integration/test_slurm_operators.py"}


def leaves() -> Iterator[str]:
    def walk(cmd: Command, path: list[str]) -> Iterator[str]:
        if isinstance(cmd, TyperGroup):
            if cmd.invoke_without_command and path:
                yield " ".join(path)  # `storekit tier` runs by itself too
            for name, sub in cmd.commands.items():
                if not sub.hidden:
                    yield from walk(sub, [*path, name])
        else:
            yield " ".join(path)

    yield from walk(get_command(build_app()), [])


@pytest.fixture
def site(tmp_path: Path, sk: Callable[..., Ran]) -> Path:
    root = tmp_path / "site"
    root.mkdir()
    make_site(root)  # tiers nvme (burst), lustre (parallel, the default), vault (archive)
    dcp_unit(root / "nvme/checkpoints/run_001", "step_000300")  # for tier --drain
    for step in (100, 200):  # a run with manifests and a `latest` tracker
        with commit(root / "lustre/checkpoints/run_002", step) as stage, stage.open("model.bin") as fh:
            fh.write(bytes([step % 7]) * 1000)
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(f'{{"text": "document number {i}"}}\n' for i in range(20)))
    return root


@pytest.mark.slow  # every command twice, a prepare and a bench io run among them: ~6 s, 15 s under load
def test_every_command_prints_nothing_but_its_answer_and_whole_lines_into_a_pipe(
    site: Path, sk: Callable[..., Ran]
) -> None:
    work = echo_job.make(site / "lustre/scratch/echo-job", [10] * 3, threads_per_process=1)
    bench_dir = site / "bench"
    bench_dir.mkdir()
    runs = {  # in order: later commands use what earlier ones made
        "init": ["init", "--tier", "lustre"],
        "status": ["status"],
        "version": ["version"],
        "layout check": ["layout", "check", "--all"],
        "layout clean": ["layout", "clean"],
        "layout show": ["layout", "show"],
        "config show": ["config", "show"],
        "config check": ["config", "check"],
        "prepare dataset": PREPARE,
        "dataset verify": ["dataset", "verify", DATASET],
        "dataset info": ["dataset", "info", DATASET],
        "dataset list": ["dataset", "list"],
        "dataset inspect": ["dataset", "inspect", DATASET],
        "dataset blend": ["dataset", "blend", DATASET],
        "ckpt list": ["ckpt", "list", "run_002"],
        "ckpt latest": ["ckpt", "latest", "run_002"],
        "ckpt verify": ["ckpt", "verify", "run_002"],
        "ckpt adopt": ["ckpt", "adopt", "run_001/step_000300", "--tier", "nvme"],
        "ckpt prune": ["ckpt", "prune", "run_002", "--keep-last", "1"],
        "tier": ["tier", "--drain"],
        "tier verify": ["tier", "verify"],
        "tier gc": ["tier", "gc"],
        "jobs run-task": ["jobs", "run-task", str(work.path), "--task-ids", "0-2"],
        "jobs finalize": ["jobs", "finalize", str(work.path)],
        "jobs status": ["jobs", "status"],
        "bench io": [
            "bench", "io", "--target", str(bench_dir), "--pattern", "shards", "--size", "2M",
            "--file-size", "1M", "--workers", "1", "--block-size", "1M", "--repeat", "1", "--no-direct",
        ],
    }  # fmt: skip
    assert sorted(set(leaves()) - set(NOT_RUN)) == sorted(runs)
    loud, cut = [], []
    for name, args in runs.items():
        ran = sk(site, *args, "--quiet")
        if ran.code != 0 or ran.stderr or (ran.stdout and name not in ANSWERS):
            loud.append(f"{name}: exit {ran.code}, stdout {ran.stdout[:200]!r}, stderr {ran.stderr[-300:]!r}")
        # the same command again without --quiet, its report into a pipe: whole lines, no padding
        report = sk(site, *args).stdout
        cut += [f"{name}: {line!r}" for line in report.splitlines() if line != line.rstrip() or "…" in line]
    assert loud == []
    assert cut == []
    assert (site / "lustre/checkpoints/run_001/step_000300/.metadata").is_file()  # the drain ran
    assert (site / f"lustre/{DATASET}/manifest.json").is_file()


def one_error(ran: Ran) -> str:
    """The `error:` line of a failed quiet run (a `hint:` may follow it; nothing else is there)."""
    lines = ran.stderr.splitlines()
    assert ran.code != 0 and lines and lines[0].startswith("error: "), ran
    assert all(line.startswith("hint: ") for line in lines[1:]), ran.stderr
    return lines[0]


def test_a_layout_violation_is_said(site: Path, sk: Callable[..., Ran]) -> None:
    (site / "lustre/datasets/text/web/V1").mkdir(parents=True)  # misnamed: versions are v1, v2, ...
    ran = sk(site, "layout", "check", "--quiet")
    assert (ran.code, ran.stdout) == (4, "")
    assert one_error(ran) == "error: 1 layout violation(s) on tier lustre"
    assert sk(site, "layout", "check", "--quiet", "--tier", "vault").code == 0


def test_a_damaged_dataset_is_said(site: Path, sk: Callable[..., Ran]) -> None:
    prepared = sk(site, *PREPARE, "-q")
    assert prepared.code == 0, prepared.stderr
    shard = site / f"lustre/{DATASET}/train-00000.bin"
    data = bytearray(shard.read_bytes())
    data[3] ^= 1
    shard.write_bytes(bytes(data))
    ran = sk(site, "dataset", "verify", DATASET, "-q")
    assert (ran.code, ran.stdout) == (4, "")
    error = one_error(ran)
    assert f"{DATASET}: 1 problem(s), the first: train-00000.bin: xxh3-128 " in error, error


def test_a_damaged_checkpoint_and_a_wrong_tracker_are_said(site: Path, sk: Callable[..., Ran]) -> None:
    run = site / "lustre/checkpoints/run_002"
    (run / "step_000100/model.bin").write_bytes(b"short")
    ran = sk(site, "ckpt", "verify", "run_002", "-q")
    assert (ran.code, ran.stdout) == (4, "")
    error = one_error(ran)
    assert error.startswith("error: 1 of 2 checkpoint(s) failed verification, the first: "), error
    assert "step_000100: model.bin: size 5 != manifest 1000" in error
    (run / "latest").write_text("step_000900\n")
    latest = sk(site, "ckpt", "latest", "run_002", "-q")
    assert (latest.code, latest.stdout) == (4, f"{run / 'step_000200'}\n")  # the answer, and why 4
    assert "checkpoints/run_002/latest: names step_000900, which does not exist" in one_error(latest)
    assert latest.stderr.splitlines()[1].startswith("hint: the newest complete checkpoint is step_000200")


def test_a_failed_drain_in_the_epilog_line_is_said(site: Path) -> None:
    def full() -> None:  # the parallel tier fills up once the first file is copied
        raise OSError(errno.ENOSPC, "No space left on device")

    line = ["--config", str(site / "storekit.toml"), "tier", "--drain", "--quiet"]  # the README's
    with faults.at("tier.file-copied", full):
        ran = run_in_process(line, cwd=site.parent)
    assert (ran.code, ran.stdout) == (6, "")
    error = one_error(ran)
    assert error.startswith(
        "error: 1 of 1 move(s) failed, the first: drain checkpoints/run_001/step_000300: "
    ), error
    assert (site / "nvme/checkpoints/run_001/step_000300/.metadata").is_file()  # still on the burst tier


def test_a_copy_that_fails_its_read_back_is_said(site: Path, sk: Callable[..., Ran]) -> None:
    unit = "checkpoints/run_001/step_000300"
    config = load_config(str(site / "storekit.toml"))
    drain_unit(
        site / "nvme", unit, config.tier("lustre"), journal_dir=journal_dir_for(config), free_source=True
    )
    copy = site / "lustre" / unit / "__1_0.distcp"
    copy.chmod(0o644)
    copy.write_bytes(b"\2" * 100)  # same size, other bytes: a flipped bit's kind of damage
    ran = sk(site, "tier", "verify", "-q")
    assert (ran.code, ran.stdout) == (4, "")
    assert one_error(ran).startswith("error: 1 of 1 moved unit(s) failed their read-back, the first: ")
