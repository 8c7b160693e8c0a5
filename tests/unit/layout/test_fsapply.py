"""`init` and `layout check` where the file system's quota tool fails: a Lustre whose `lfs quota`
refuses (project quotas not enabled), with recorded `lfs` output. One error line naming the area and
what lfs said, never a traceback. (CephFS for real: tests/integration/test_cephfs.py.)"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from storekit.fsfeatures import Lustre

LAYOUT = '[layout]\nname = "t"\n[areas.data]\nmode = "0755"\nquota = "1GiB"\n'
REFUSED = "prj quotas are not enabled."


def failing_lfs(mount: str) -> Lustre:
    def run(cmd: Sequence[str]) -> str:
        if cmd[:3] == ["lfs", "project", "-d"]:
            return f"   77 P {cmd[3]}\n" if cmd[3].endswith("/data") else f"    0 - {cmd[3]}\n"
        if cmd[:2] == ["lfs", "quota"]:
            raise OSError(5, f"{' '.join(cmd)} failed: {REFUSED}")
        return "1\n"

    return Lustre(mount, run=run)


@pytest.mark.parametrize("command", [["layout", "check"], ["init"]])
def test_a_failing_lfs_is_one_error_line_naming_the_area(
    tmp_path: Path, sk: Any, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    (tmp_path / "l.toml").write_text(LAYOUT)
    assert sk(tmp_path, "init", "--layout", "l.toml", "--json").code == 0  # laid out on local disk
    root = tmp_path / "storage"
    monkeypatch.setattr("storekit.layout.fsapply.backend_for", lambda path: failing_lfs(str(root)))
    ran = sk(tmp_path, *command, "--layout", "l.toml", "--json")
    assert ran.code == 1, ran.stderr
    message = ran.json()["error"]["message"]
    assert message == (
        f"{root / 'data'}: reading its lustre quotas and striping: lfs quota -p 77 {root} failed: {REFUSED}"
    )
    assert ran.stderr.startswith(f"error: {message}\n") and "Traceback" not in ran.stderr
