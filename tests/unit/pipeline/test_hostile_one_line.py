"""Issue #33 item 8: what a shared cluster does to a command (a tier it cannot write, another user's
stale lease, a file where the work dir belongs, another user's private work dir, init on a dangling
link) is one `error:` line and exit 1, never a traceback; nothing is half-written."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from storekit.lease import Lease, sibling_lease_path
from tests.conftest import run_cli
from tests.hostile import NEIGHBOUR_UID, as_neighbour, neighbour_cli, shared_dir
from tests.unit.pipeline.helpers import TOKENIZER, sample_records, write_jsonl

__all__ = ["shared_dir"]  # the fixture, imported for pytest
BASE = ["prepare", "dataset", "--tokenizer", TOKENIZER, "--name", "ol", "-i", "corpus.jsonl"]
BASE += ["--json", "--quiet", "--workers", "1"]
FINAL = Path("storage/datasets/text/ol/v1")


def one_line(code: int, stdout: str, stderr: str, expected: int = 1) -> str:
    assert code == expected, stderr
    assert "Traceback" not in stderr and stderr.startswith("error: "), stderr
    message = str(json.loads(stdout)["error"]["message"])
    assert "internal error" not in message
    return message


def _corpus(base: Path) -> None:
    write_jsonl(base / "corpus.jsonl", sample_records(limit_bytes=4_000, max_doc=2_000))
    os.chmod(base / "corpus.jsonl", 0o644)


def test_a_user_preparing_into_a_tier_they_cannot_write_gets_one_line(shared_dir: Path, capsys: Any) -> None:
    _corpus(shared_dir)
    assert run_cli(["init", "--quiet"], capsys).code == 0  # root's tier: datasets/ is 0755 root
    code, out, err = neighbour_cli(BASE, shared_dir / "shared" / "result.json")
    message = one_line(code, out, err)
    assert "storage/datasets/text" in message and "permission denied" in message.lower()
    assert not (shared_dir / FINAL).exists()


def test_another_users_stale_lease_in_a_sticky_dir_is_one_line(shared_dir: Path, capsys: Any) -> None:
    _corpus(shared_dir)
    out = shared_dir / FINAL.parent
    out.mkdir(parents=True)
    out.chmod(0o1777)
    as_neighbour(lambda: Lease(sibling_lease_path(shared_dir / FINAL), purpose="killed").acquire())
    res = run_cli(BASE, capsys)  # root may break it; a third user may not
    assert res.code == 0, res.stderr
    os.rename(shared_dir / FINAL, shared_dir / "elsewhere")  # the same again, by another user
    as_neighbour(lambda: Lease(sibling_lease_path(shared_dir / FINAL), purpose="killed").acquire())
    code, stdout, stderr = neighbour_cli_as(BASE, shared_dir, uid=NEIGHBOUR_UID + 1)
    message = one_line(code, stdout, stderr)
    assert "a stale lease of user" in message and "that you may not remove" in message


def neighbour_cli_as(args: list[str], base: Path, uid: int) -> tuple[int, str, str]:
    result = base / "shared" / f"result-{uid}.json"

    def run() -> None:
        ran = run_cli(args)
        result.write_text(json.dumps([ran.code, ran.stdout, ran.stderr]))

    as_neighbour(run, uid=uid)
    code, stdout, stderr = json.loads(result.read_text())
    return int(code), str(stdout), str(stderr)


def test_a_file_where_the_work_dir_belongs_is_one_line(shared_dir: Path, capsys: Any) -> None:
    _corpus(shared_dir)
    (shared_dir / "wd").write_bytes(b"a file, not a directory\n")
    message = one_line(*_ran(run_cli([*BASE, "--work-dir", "wd"], capsys)), expected=3)
    assert "/wd: not a directory" in message
    assert (shared_dir / "wd").read_bytes() == b"a file, not a directory\n"


def test_roots_private_work_dir_met_by_another_user_is_one_line(shared_dir: Path, capsys: Any) -> None:
    _corpus(shared_dir)
    plan = run_cli([*BASE, "--dry-run"], capsys).json()["plan"]
    work = Path(plan["work_dir"])
    for shared in (work.parent, shared_dir / FINAL.parent):
        shared.mkdir(parents=True)
        shared.chmod(0o1777)
    work.mkdir(mode=0o700)  # root's, from a run that was killed
    code, out, err = neighbour_cli(BASE, shared_dir / "shared" / "result.json")
    message = one_line(code, out, err)
    assert str(work) in message  # permission denied, or owned by uid 0: named either way


def test_init_on_a_dangling_symlink_root_is_one_line(shared_dir: Path, capsys: Any) -> None:
    (shared_dir / "gone").symlink_to(shared_dir / "nowhere")
    (shared_dir / "storekit.toml").write_text(f'[tiers.t]\nurl = "{shared_dir / "gone"}"\n')
    res = run_cli(["init", "--json"], capsys)
    assert res.code in (1, 3), res.stderr
    assert "Traceback" not in res.stderr and "internal error" not in res.stdout
    assert not (shared_dir / "nowhere").exists()


def _ran(res: Any) -> tuple[int, str, str]:
    return res.code, res.stdout, res.stderr
