"""Slurm's client commands: missing or unreachable is exit 5 in one line; output parsing."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest

from storekit.errors import ExitCode, StorekitError
from storekit.slurm import commands
from storekit.slurm.batches import limits_from_config


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_sbatch_missing_is_one_line_exit_5(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}  # a PATH without Slurm's commands
    with pytest.raises(StorekitError) as info:
        commands.submit("job.sh", env=env)
    assert info.value.exit_code == ExitCode.RETRYABLE
    assert info.value.message == "sbatch not found: Slurm's client commands are not installed here"


def test_controller_down_is_one_line_exit_5(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("sbatch") is None:
        pytest.skip("needs Slurm's client commands (Debian package slurm-client)")
    conf = tmp_path / "slurm.conf"  # a real client, pointed at a port nothing listens on
    conf.write_text(
        f"ClusterName=down\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort={_free_port()}\n"
        "AuthType=auth/munge\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=n1 Default=YES\n"
        "MessageTimeout=2\n"
    )
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    for call in (lambda: commands.submit(str(script)), commands.show_config, lambda: commands.queued(["1"])):
        with pytest.raises(StorekitError) as info:
            call()
        assert info.value.exit_code == ExitCode.RETRYABLE, info.value.message
        assert "\n" not in info.value.message


def test_squeue_rows_one_per_array_element() -> None:
    out = "41_0|41|0|RUNNING|sk-node1\n41_3|41|3|PENDING|Resources\n42|42|N/A|PENDING|Dependency\n"
    rows = commands.parse_squeue(out)
    assert [(r.job_id, r.array_job_id, r.array_index, r.state) for r in rows] == [
        ("41_0", "41", 0, "RUNNING"),
        ("41_3", "41", 3, "PENDING"),
        ("42", "42", None, "PENDING"),
    ]
    assert rows[2].reason == "Dependency"


def test_scontrol_records_keep_values_with_spaces() -> None:
    line = (
        "JobId=43 ArrayJobId=41 ArrayTaskId=2 JobName=storekit x JobState=FAILED Reason=NonZeroExitCode "
        "Dependency=(null) ExitCode=1:0 StdOut=/shared/logs/41_2.out"
    )
    rec = commands.parse_scontrol_record(line)
    assert rec["JobName"] == "storekit x" and rec["JobState"] == "FAILED"
    assert rec["ExitCode"] == "1:0" and rec["StdOut"] == "/shared/logs/41_2.out"


def test_config_parsing_feeds_the_limits() -> None:
    # the shape of `scontrol show config`
    text = (
        "Configuration data as of 2026-11-23T17:00:00\nMaxArraySize            = 5\n"
        "MaxJobCount             = 300\nSchedulerParameters     = batch_sched_delay=0,bf_interval=1\n"
    )
    parsed = commands.parse_show_config(text)
    assert parsed["SchedulerParameters"] == "batch_sched_delay=0,bf_interval=1"
    limits = limits_from_config(parsed)
    assert (limits.max_array_size, limits.max_job_count) == (5, 300)
