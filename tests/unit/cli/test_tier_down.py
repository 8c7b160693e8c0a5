"""A tier that is down (its root missing, or not on the mount the config names) is down everywhere:
`status` (and its storekit_tier_up), `layout check`, exit 5. Every report (an error's JSON too) says
which config it used, and a run with no config outside a terminal says so on stderr."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Ran


def tier_up(prom: Path) -> dict[str, str]:
    return dict(re.findall(r'^storekit_tier_up\{tier="(\w+)",role="\w+"\} (\d)$', prom.read_text(), re.M))


def findmnt(path: Path) -> tuple[str, str]:
    """The real mount of `path`, as util-linux sees it."""
    if shutil.which("findmnt") is None:
        pytest.skip("findmnt (util-linux) not installed")
    out = subprocess.run(
        ["findmnt", "-n", "-o", "FSTYPE,SOURCE", "--target", str(path)], capture_output=True, text=True
    )
    fstype, source = out.stdout.split()
    return fstype, source


def site(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / "storekit.toml").write_text(
        f'[tiers.fast]\nurl = "./fast"\n[tiers.lustre]\nurl = "./mnt/lustre/storage"\n{extra}'
    )
    return tmp_path


def test_an_unmounted_tier_root_is_down_in_status_check_and_metrics(
    tmp_path: Path, sk: Callable[..., Ran]
) -> None:
    root = site(tmp_path)
    assert sk(root, "init", "--tier", "fast", "-q").code == 0
    (root / "mnt/lustre").mkdir(parents=True)  # the mount point is there, nothing is mounted on it
    prom = tmp_path / "storekit.prom"
    ran = sk(root, "status", "--prometheus", str(prom), "--json")
    assert ran.code == 5
    doc = ran.json()
    tiers = {t["tier"]: t for t in doc["tiers"]}
    assert tiers["fast"]["reachable"] is True and tiers["lustre"]["reachable"] is False
    assert f"root {root / 'mnt/lustre/storage'} does not exist" in tiers["lustre"]["error"]
    assert tier_up(prom) == {"fast": "1", "lustre": "0"}
    assert ran.stderr.splitlines()[-1].startswith("error: 1 tier(s) unreachable: tier lustre: root ")
    check = sk(root, "layout", "check", "--all", "--json")
    assert check.code == 5
    assert {t["tier"]: t["reachable"] for t in check.json()["tiers"]} == {"fast": True, "lustre": False}
    one = sk(root, "layout", "check", "--tier", "lustre")
    assert one.code == 5
    assert one.stderr.splitlines() == [
        f"error: tier lustre: root {root / 'mnt/lustre/storage'} does not exist (not mounted?)",
        "hint: is it mounted? a new tier is created by: storekit init --tier lustre",
    ]


def test_a_root_not_on_the_configured_mount_is_down(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    fstype, source = findmnt(tmp_path)
    wrong = "lustre" if fstype != "lustre" else "nfs"
    root = site(tmp_path, f'mount_type = "{wrong}"\n')
    assert sk(root, "init", "--tier", "fast", "-q").code == 0
    (root / "mnt/lustre/storage").mkdir(parents=True)  # the root fs's empty directory, not Lustre
    prom = tmp_path / "storekit.prom"
    ran = sk(root, "status", "--prometheus", str(prom), "--json")
    assert ran.code == 5 and tier_up(prom) == {"fast": "1", "lustre": "0"}
    error = {t["tier"]: t["error"] for t in ran.json()["tiers"]}["lustre"]
    assert (
        error.startswith("tier lustre is down: ")
        and f"({fstype} from {source}), not a {wrong} mount" in error
    )
    assert sk(root, "layout", "check", "--tier", "lustre").code == 5
    # the same root, declared as what it is really mounted from: up
    site(tmp_path, f'mount_type = "{fstype}"\nmount_source = "{source}"\n')
    assert sk(root, "status", "--prometheus", str(prom), "--quiet").code == 0
    assert tier_up(prom) == {"fast": "1", "lustre": "1"}
    site(tmp_path, f'mount_type = "{fstype}"\nmount_source = "/dev/not-{source.strip("/")}"\n')
    ran = sk(root, "status", "--tier", "lustre", "--json")
    assert ran.code == 5 and f"mounted from {source}, not from /dev/not-" in ran.json()["tiers"][0]["error"]


def test_every_report_names_its_config(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    root = site(tmp_path)
    cfg = str(root / "storekit.toml")
    for args in (
        ["init", "--tier", "fast"],
        ["status", "--tier", "fast"],
        ["layout", "check", "--tier", "fast"],
    ):
        human = sk(tmp_path.parent, *args, "--config", cfg)
        assert human.code == 0, human.stderr
        assert human.stdout.splitlines()[0] == f"config: {cfg}"
        assert sk(tmp_path.parent, *args, "--config", cfg, "--json").json()["config"] == cfg
    assert sk(root, "dataset", "list", "--tier", "fast", "--json").json()["config"] == "storekit.toml"
    # a failure's one JSON document names it too: which site a cron job was looking at
    missing = sk(
        tmp_path.parent, "dataset", "verify", "datasets/text/nope/v1", "-t", "fast", "-c", cfg, "--json"
    )
    assert missing.code == 3 and missing.json()["error"]["exit_code"] == 3
    assert missing.json()["config"] == cfg


def test_no_config_outside_a_terminal_is_said_on_stderr(
    tmp_path: Path, sk: Callable[..., Ran], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    quiet = sk(tmp_path, "status", "--quiet")  # the cron line, run from the wrong directory
    assert (quiet.code, quiet.stdout) == (5, "")  # not green: ./storage is not there
    assert quiet.stderr == (  # --quiet: the error only
        f"error: 1 tier(s) unreachable: tier local: root {tmp_path}/storage does not exist (not mounted?)\n"
    )
    assert sk(tmp_path, "init", "--quiet").code == 0
    ran = sk(tmp_path, "status", "--json")  # it succeeds: on the embedded default, which it says
    assert ran.code == 0
    assert ran.json()["config"] == "<embedded default: ./storage>"
    assert ran.stderr == (
        f"warning: no config file found (--config, $STOREKIT_CONFIG, storekit.toml, "
        f"{tmp_path}/xdg/storekit/storekit.toml, /etc/storekit.toml); used the embedded default: "
        f"one tier at {tmp_path}/storage\n"
    )
    # $XDG_CONFIG_HOME/storekit/storekit.toml is found from any directory
    (tmp_path / "xdg/storekit").mkdir(parents=True)
    site(tmp_path / "xdg/storekit")
    (tmp_path / "xdg/storekit/fast").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ran = sk(elsewhere, "status", "--tier", "fast", "--json")
    assert "warning" not in ran.stderr and ran.json()["config"] == f"{tmp_path}/xdg/storekit/storekit.toml"


def test_nothing_is_written_beside_a_mount_that_is_not_there(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    """Down everywhere: prepare, ckpt, dataset and bench io refuse a tier whose root is not on the
    mount its config names (they wrote onto the root file system under the mount point, exit 0)."""
    fstype, _ = findmnt(tmp_path)
    wrong = "lustre" if fstype != "lustre" else "nfs"
    root = site(tmp_path, f'mount_type = "{wrong}"\n')
    storage = root / "mnt/lustre/storage"
    storage.mkdir(parents=True)  # what an unmounted mount point's directory looks like
    src = root / "in.jsonl"
    src.write_text('{"text": "a document"}\n')
    tok = "bundled:anthropic-bpe-65k.tokenizer.json.gz"
    for args in (
        ["prepare", "dataset", "-i", str(src), "--tokenizer", tok, "--name", "web"],
        ["ckpt", "list", "run_001"],
        ["dataset", "verify", "datasets/text/web/v1"],
        ["dataset", "verify", str(storage / "datasets/text/web/v1")],  # by its absolute path
        ["bench", "io", "--pattern", "meta", "--files", "4", "--workers", "1"],
    ):
        ran = sk(root, *args, "--tier", "lustre")
        assert ran.code == 5, (args, ran.stderr)
        assert ran.stderr.startswith(f"error: tier lustre is down: {storage} is on "), ran.stderr
        assert f"not a {wrong} mount" in ran.stderr.splitlines()[0]
    assert list(storage.iterdir()) == []  # nothing was written on the wrong disk
