"""Issue #33: no FIFO hangs a command, and no odd entry a neighbour (a real second uid) plants at a
name storekit reads or tidies in a shared directory stops one: a FIFO at a dataset's lease in a
sticky output parent or at a work dir's lease in scratch/, a directory or another user's file under
the name of a lease's write temp. Opening a FIFO for reading blocks until someone writes it, so the
runs that would hang are subprocesses with a bound, which only ever matters on a hang."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from storekit.lease import dir_lease_path, sibling_lease_path
from tests.conftest import run_cli, run_storekit
from tests.hostile import NEIGHBOUR_UID, as_neighbour, shared_dir
from tests.unit.pipeline.helpers import TOKENIZER, sample_records, write_jsonl

__all__ = ["shared_dir"]  # the fixture, imported for pytest
BASE = ["prepare", "dataset", "--tokenizer", TOKENIZER, "--name", "ff", "-i", "corpus.jsonl"]
BASE += ["--json", "--quiet", "--workers", "1"]
FINAL = Path("storage/datasets/text/ff/v1")
HANG = 120  # seconds: far beyond a run of this size; reached only by a run that hangs


def _fifo_lease_in_a_sticky_output_parent(base: Path) -> Path:
    assert run_cli(["init", "--quiet"]).code == 0  # root's tier: scratch/ 1777, datasets/ 0755
    write_jsonl(base / "corpus.jsonl", sample_records(limit_bytes=4_000, max_doc=2_000))
    os.chmod(base / "corpus.jsonl", 0o644)
    out = base / FINAL.parent
    out.mkdir(parents=True)
    out.chmod(0o1777)  # a shared output parent, sticky like /tmp
    lease = sibling_lease_path(base / FINAL)
    as_neighbour(lambda: os.mkfifo(lease))  # nobody ever writes it
    return lease


def test_a_fifo_at_the_datasets_lease_name_does_not_hang_prepare(shared_dir: Path, capsys: Any) -> None:
    lease = _fifo_lease_in_a_sticky_output_parent(shared_dir)
    res = run_storekit(BASE, cwd=shared_dir, timeout=HANG)  # hung in read_lease before
    assert res.code == 0, res.stderr
    assert json.loads(res.stdout)["status"] == "prepared"
    assert not os.path.lexists(lease)  # not a lease: broken like a stale one (root may)
    verify = run_cli(["dataset", "verify", "datasets/text/ff/v1", "--json"], capsys)
    assert verify.code == 0, verify.stdout


def test_another_users_fifo_at_the_lease_name_is_one_line_for_whoever_may_not_remove_it(
    shared_dir: Path,
) -> None:
    lease = _fifo_lease_in_a_sticky_output_parent(shared_dir)
    result = shared_dir / "shared" / "result.json"

    def third_user() -> None:
        signal.alarm(HANG)  # a hang ends this child (and fails the test) instead of the suite
        ran = run_cli(BASE)
        result.write_text(json.dumps([ran.code, ran.stdout, ran.stderr]))

    as_neighbour(third_user, uid=NEIGHBOUR_UID + 1)
    code, stdout, stderr = json.loads(result.read_text())
    assert code == 1, stderr
    assert stderr.startswith("error: ") and "Traceback" not in stderr
    message = json.loads(stdout)["error"]["message"]
    assert f"{lease}: not a lease: not a regular file (a FIFO), owned by " in message  # uid 1001's name
    assert "that you may not remove" in message
    assert os.path.lexists(lease) and not (shared_dir / FINAL).exists()


def test_layout_clean_reclaims_an_abandoned_work_dir_whose_lease_is_a_fifo(
    shared_dir: Path, capsys: Any
) -> None:
    """One odd file never stops a clean-up: root's `layout clean` (plan and apply) looked at the
    lease of a neighbour's abandoned dir in scratch/ and blocked opening it."""
    assert run_cli(["init", "--quiet"], capsys).code == 0
    scratch = shared_dir / "storage" / "scratch"
    work, later = scratch / "a-storekit-prepare-rt", scratch / "z-old-run"

    def neighbour() -> None:
        work.mkdir(mode=0o700)
        (work / "plan.json").write_bytes(b"{}")
        os.mkfifo(dir_lease_path(work))
        later.mkdir()
        (later / "data.bin").write_bytes(b"x" * 100)

    as_neighbour(neighbour)
    stamp = time.time() - 30 * 86400.0
    for path in (dir_lease_path(work), work / "plan.json", work, later / "data.bin", later):
        os.utime(path, (stamp, stamp), follow_symlinks=False)

    dry = run_storekit(["layout", "clean", "--dry-run", "--json"], cwd=shared_dir, timeout=HANG)
    assert dry.code == 0, dry.stdout + dry.stderr
    planned = {e["path"]: e["action"] for e in json.loads(dry.stdout)["entries"]}
    assert planned == {"scratch/a-storekit-prepare-rt": "delete", "scratch/z-old-run": "delete"}
    assert work.exists() and later.exists()
    res = run_storekit(["layout", "clean", "--json"], cwd=shared_dir, timeout=HANG)
    assert res.code == 0, res.stdout + res.stderr
    assert set(json.loads(res.stdout)["deleted"]) == set(planned)
    assert os.listdir(scratch) == []


def test_a_neighbours_entries_under_a_lease_temps_name_do_not_stop_a_run(
    shared_dir: Path, capsys: Any
) -> None:
    """A lease's holder removes the write temps killed writes of that lease left beside it; a
    neighbour's directory (EISDIR) or file (EPERM in a sticky dir) under such a name stopped the
    run after it took the lease. They are not the holder's temps: left alone, and the run goes on."""
    assert run_cli(["init", "--quiet"], capsys).code == 0
    write_jsonl(shared_dir / "corpus.jsonl", sample_records(limit_bytes=4_000, max_doc=2_000))
    os.chmod(shared_dir / "corpus.jsonl", 0o644)
    out = shared_dir / FINAL.parent
    out.mkdir(parents=True)
    out.chmod(0o1777)
    temp = out / f".{sibling_lease_path(shared_dir / FINAL).name}.storekit-tmp-"
    planted_dir, planted_file = Path(f"{temp}dir"), Path(f"{temp}file")

    def plant() -> None:
        planted_dir.mkdir()
        planted_file.write_bytes(b"theirs\n")

    as_neighbour(plant)
    res = run_cli(BASE, capsys)  # root: the directory stopped it (EISDIR)
    assert res.code == 0, res.stderr
    assert planted_dir.is_dir() and planted_file.read_bytes() == b"theirs\n"  # another user's: kept
    result = shared_dir / "shared" / "result.json"

    def third_user() -> None:  # the file stopped it (EPERM: sticky)
        ran = run_cli([*BASE, "--min-chars", "3"])
        result.write_text(json.dumps([ran.code, ran.stdout, ran.stderr]))

    os.rename(shared_dir / FINAL, shared_dir / "elsewhere")  # the path free again, for uid 1002
    planted_dir.rmdir()
    as_neighbour(third_user, uid=NEIGHBOUR_UID + 1)
    code, stdout, stderr = json.loads(result.read_text())
    assert code == 0, stderr
    assert json.loads(stdout)["status"] == "prepared"
    assert planted_file.read_bytes() == b"theirs\n"
