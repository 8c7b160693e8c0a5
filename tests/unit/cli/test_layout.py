"""init / layout check / status through the real CLI: exit codes, --json documents, Prometheus file."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import Ran, run_in_process


def run(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Ran:
    return run_in_process(args, cwd=cwd, env=env)


def as_json(proc: Ran) -> Any:
    return json.loads(proc.stdout)


def test_init_check_status_on_embedded_default(tmp_path: Path, promtool: Callable[[str], None]) -> None:
    dry = run(tmp_path, "init", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = as_json(dry)
    assert plan["schema_version"] == 1 and plan["dry_run"] is True
    assert {"action": "mkdir", "path": "scratch", "mode": "1777", "detail": ""} in plan["actions"]
    assert not (tmp_path / "storage").exists()  # dry run changes nothing

    done = run(tmp_path, "init", "--json")
    assert done.returncode == 0, done.stderr
    assert as_json(done)["actions"] == plan["actions"]
    assert (tmp_path / "storage/datasets/multimodal").is_dir()
    again = run(tmp_path, "init", "--json")
    assert as_json(again)["actions"] == []

    clean = run(tmp_path, "layout", "check", "--json")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    doc = as_json(clean)
    assert doc["clean"] is True and doc["tiers"][0]["tier"] == "local"

    step = tmp_path / "storage/checkpoints/run_001/step_000100"
    step.mkdir(parents=True)
    assert run(tmp_path, "layout", "check", "--json").returncode == 0  # just written: in progress
    os.utime(step, (time.time() - 86400, time.time() - 86400))  # a day without change: abandoned
    dirty = run(tmp_path, "layout", "check", "--json")
    assert dirty.returncode == 4
    findings = as_json(dirty)["tiers"][0]["findings"]
    assert findings == [
        {
            "rule": "incomplete-checkpoint",
            "path": "checkpoints/run_001/step_000100",
            "message": "storekit: no manifest.json; torch-dcp: no .metadata or __0.metadata; "
            "orbax: no _CHECKPOINT_METADATA",
        }
    ]
    human = run(tmp_path, "layout", "check")
    assert human.returncode == 4 and "incomplete-checkpoint" in human.stdout

    (tmp_path / "storage/logs/a.log").write_bytes(b"x" * 1234)
    prom = tmp_path / "storekit.prom"
    st = run(tmp_path, "status", "--json", "--prometheus", str(prom))
    assert st.returncode == 0, st.stderr
    areas = {a["area"]: a for a in as_json(st)["tiers"][0]["areas"]}
    assert areas["logs"]["bytes"] == 1234 and areas["logs"]["files"] == 1
    assert areas["checkpoints"]["dirs"] == 2
    text = prom.read_text()
    assert 'storekit_area_bytes{tier="local",role="plain",area="logs"} 1234' in text
    assert 'storekit_tier_up{tier="local",role="plain"} 1' in text
    assert "# TYPE storekit_area_files gauge" in text
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".storekit.prom")]  # temp renamed away
    assert prom.stat().st_mode & 0o777 == 0o644
    promtool(text)


def test_status_reports_unreachable_tier_and_exits_5(tmp_path: Path, promtool: Callable[[str], None]) -> None:
    cfg = tmp_path / "storekit.toml"
    cfg.write_text(
        '[tiers.nvme]\nurl = "./storage"\nrole = "burst"\n'
        '[tiers.lustre]\nurl = "file:///nonexistent-mount-xyz/storage"\nrole = "parallel"\n'
    )
    (tmp_path / "storage").mkdir()
    prom = tmp_path / "s.prom"
    st = run(tmp_path, "status", "--json", "--prometheus", str(prom))
    assert st.returncode == 5
    tiers = {t["tier"]: t for t in as_json(st)["tiers"]}
    assert tiers["nvme"]["reachable"] is True and tiers["lustre"]["reachable"] is False
    assert "/nonexistent-mount-xyz" in tiers["lustre"]["error"]
    assert 'storekit_tier_up{tier="lustre",role="parallel"} 0' in prom.read_text()
    promtool(prom.read_text())
    assert "error:" in st.stderr and "Traceback" not in st.stderr


def test_check_bad_layout_file_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[layout]\nname = "x"\n[areas.data]\nmode = "rwx"\n')
    proc = run(tmp_path, "layout", "check", "--layout", str(bad))
    assert proc.returncode == 2
    assert f"error: {bad}: areas.data.mode: expected an octal mode string" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = run(tmp_path, "layout", "check", "--layout", str(bad), "--json")
    assert as_json(proc)["error"]["exit_code"] == 2


def test_layout_show_json(tmp_path: Path) -> None:
    proc = run(tmp_path, "layout", "show", "--json")
    assert proc.returncode == 0
    doc = as_json(proc)
    names = [a["name"] for a in doc["layout"]["areas"]]
    assert names == ["datasets", "checkpoints", "logs", "models", "scratch"]
    assert "missing-manifest" in doc["rules"]


def test_check_all_reports_every_tier_and_the_unreachable_one_as_an_error_row(tmp_path: Path) -> None:
    (tmp_path / "storekit.toml").write_text(
        'default_tier = "nvme"\n[tiers.nvme]\nurl = "./storage"\nrole = "burst"\n'
        '[tiers.lustre]\nurl = "file:///nonexistent-mount-xyz/storage"\nrole = "parallel"\n'
        '[tiers.nfs]\nurl = "./nfs"\n'
    )
    assert run(tmp_path, "init", "--quiet").returncode == 0
    assert run(tmp_path, "init", "--tier", "nfs", "--quiet").returncode == 0
    (tmp_path / "nfs/datasets/text/wiki/v1").mkdir(parents=True)  # a dataset without its manifest
    proc = run(tmp_path, "layout", "check", "--all", "--json")
    assert proc.returncode == 5, proc.stderr
    doc = as_json(proc)  # the one document on stdout, with every tier in it
    tiers = {t["tier"]: t for t in doc["tiers"]}
    assert list(tiers) == ["nvme", "lustre", "nfs"]
    assert tiers["nvme"]["clean"] is True and tiers["nvme"]["reachable"] is True
    assert [f["rule"] for f in tiers["nfs"]["findings"]] == ["missing-manifest"]
    assert tiers["lustre"]["reachable"] is False and "/nonexistent-mount-xyz" in tiers["lustre"]["error"]
    assert doc["clean"] is False and doc["tiers_failed"] == 1 and doc["findings_total"] == 1
    assert proc.stderr.splitlines()[0].startswith("error: tier lustre:")
    human = run(tmp_path, "layout", "check", "--all")
    assert human.returncode == 5
    lines = human.stdout.splitlines()
    assert lines[0] == "config: storekit.toml"
    assert lines[1].startswith("tier nvme (") and "clean" in lines[1]
    assert any(line.startswith("tier lustre (") and "NOT CHECKED" in line for line in lines)
    assert "missing-manifest" in human.stdout


def test_check_where_no_layout_exists_is_down_and_suggests_init(tmp_path: Path) -> None:
    proc = run(tmp_path, "layout", "check")
    assert proc.returncode == 5  # a missing root is a tier that is down (an unmounted mount point)
    assert proc.stderr.splitlines() == [
        f"error: tier local: root {tmp_path / 'storage'} does not exist (not mounted?)",
        "hint: is it mounted? a new tier is created by: storekit init",
    ]


def test_init_refuses_a_foreign_directory_in_a_dry_run_too(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "other-user.dat").write_bytes(b"x")
    shared.chmod(0o1777)
    (tmp_path / "storekit.toml").write_text(f'[tiers.t]\nurl = "{shared}"\n')
    for args in (["--dry-run", "--json"], ["--json"]):
        proc = run(tmp_path, "init", *args)
        assert proc.returncode == 1, proc.stderr
        assert "holds no storekit layout" in as_json(proc)["error"]["message"]
        assert proc.stderr.count("\n") == 2 and "hint: " in proc.stderr and "--adopt" in proc.stderr
        assert (shared.stat().st_mode & 0o7777) == 0o1777 and os.listdir(shared) == ["other-user.dat"]
    dry = run(tmp_path, "init", "--adopt", "--dry-run", "--json")
    assert dry.returncode == 0 and {"chmod"} <= {a["action"] for a in as_json(dry)["actions"]}
    assert (shared.stat().st_mode & 0o7777) == 0o1777
    assert run(tmp_path, "init", "--adopt", "--quiet").returncode == 0
    assert (shared / "other-user.dat").read_bytes() == b"x" and (shared / "scratch").is_dir()


def test_init_lists_its_actions_once(tmp_path: Path) -> None:
    proc = run(tmp_path, "init")
    assert proc.returncode == 0, proc.stderr
    # no second copy of the actions in a log; only which config was used (not a terminal)
    assert proc.stderr.startswith("warning: no config file found") and proc.stderr.count("\n") == 1
    assert proc.stdout.count(" scratch ") == 1 and "1777" in proc.stdout
