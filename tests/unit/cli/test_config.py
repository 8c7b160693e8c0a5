"""`storekit config show|check` through the real CLI: bad config files (exit 2), unreachable tiers (exit 5),
credentials never printed."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from storekit.config import TierConfig
from storekit.store import open_store
from tests.conftest import Ran, remove_bucket, run_in_process, s3_options

SECRET = "TopSecret-9f2c"  # must never appear in any output
KEY_ID = "AKIDEXAMPLE77"


def run(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Ran:
    return run_in_process(args, cwd=cwd, env=env)


def one_json(proc: Ran) -> Any:
    return json.loads(proc.stdout)  # fails unless stdout is exactly one JSON document


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once the socket is closed


def test_show_embedded_default(tmp_path: Path) -> None:
    proc = run(tmp_path, "config", "show", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = one_json(proc)
    assert doc["schema_version"] == 1 and doc["command"] == "config show"
    assert doc["default_tier"] == "local" and doc["source"].startswith("<embedded default")
    assert doc["tiers"] == [
        {
            "name": "local",
            "url": (tmp_path / "storage").resolve().as_uri(),
            "scheme": "file",
            "role": "plain",
            "layout": "llm-cluster",
            "default": True,
            "options": {},
            "transfer": {},
            "mount_type": None,
            "mount_source": None,
        }
    ]


def test_show_masks_credentials(tmp_path: Path) -> None:
    (tmp_path / "storekit.toml").write_text(
        'default_tier = "archive"\n[tiers.nvme]\nurl = "./nvme"\nrole = "burst"\n'
        '[tiers.archive]\nurl = "s3://archive/storage"\nrole = "archive"\n'
        f'[tiers.archive.options]\nendpoint_url = "http://rgw:7480"\nkey = "{KEY_ID}"\nsecret = "{SECRET}"\n'
    )
    human = run(tmp_path, "config", "show")
    proc = run(tmp_path, "config", "show", "--json")
    assert proc.returncode == 0 and human.returncode == 0, proc.stderr + human.stderr
    for out in (proc.stdout, proc.stderr, human.stdout, human.stderr):
        assert SECRET not in out and KEY_ID not in out
    tiers = {t["name"]: t for t in one_json(proc)["tiers"]}
    assert tiers["archive"]["options"] == {"endpoint_url": "http://rgw:7480", "key": "***", "secret": "***"}
    assert tiers["archive"]["default"] and not tiers["nvme"]["default"]
    assert tiers["nvme"]["url"] == (tmp_path / "nvme").resolve().as_uri()
    assert "tiers from storekit.toml (default: archive)" in human.stdout
    assert any(
        line.split()[:3] == ["archive", "archive", "s3://archive/storage"] and "secret=***" in line
        for line in human.stdout.splitlines()
    ), human.stdout
    only = one_json(run(tmp_path, "config", "show", "--json", "--tier", "nvme"))
    assert [t["name"] for t in only["tiers"]] == ["nvme"]
    missing = run(tmp_path, "config", "show", "--tier", "tape")
    assert missing.returncode == 3 and "no tier named 'tape'" in missing.stderr


BAD = {
    "bad-toml": ('[tiers.a\nurl = "/x"\n', None, "invalid TOML"),
    "unknown-key": ('[tiers.a]\nurl = "/x"\nsize = 3\n', "tiers.a.size", "unknown key"),
    "wrong-type": ("[tiers.a]\nurl = 5\n", "tiers.a.url", "expected a string"),
    "bad-role": ('[tiers.a]\nurl = "/x"\nrole = "fast"\n', "tiers.a.role", "expected one of"),
    "unknown-default": ('default_tier = "b"\n[tiers.a]\nurl = "/x"\n', "default_tier", "unknown tier"),
    "unsupported-scheme": ('[tiers.a]\nurl = "gs://b/x"\n', "tiers.a.url", "unsupported scheme"),
    "s3-option-typo": (
        f'[tiers.a]\nurl = "s3://b/x"\n[tiers.a.options]\nendpoit_url = "http://h"\nsecret = "{SECRET}"\n',
        "tiers.a.options.endpoit_url",
        "unknown s3 option",
    ),
    "endpoint-credentials": (
        f'[tiers.a]\nurl = "s3://b/x"\n[tiers.a.options]\nendpoint_url = "http://u:{SECRET}@h:1"\n',
        "tiers.a.options.endpoint_url",
        "not used by S3",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_config_exit_2_names_file_and_key(tmp_path: Path, case: str) -> None:
    text, key, phrase = BAD[case]
    cfg = tmp_path / "site.toml"
    cfg.write_text(text)
    proc = run(tmp_path, "config", "show", "--config", str(cfg))
    assert proc.returncode == 2
    first = proc.stderr.splitlines()[0]
    assert first.startswith(f"error: {cfg}: {key}: " if key else f"error: {cfg}: ") and phrase in first
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert SECRET not in proc.stderr

    as_json = run(tmp_path, "config", "show", "--config", str(cfg), "--json")
    assert as_json.returncode == 2
    error = one_json(as_json)["error"]
    assert error["exit_code"] == 2 and phrase in error["message"] and str(cfg) in error["message"]
    assert SECRET not in as_json.stdout + as_json.stderr


def test_bad_config_found_by_env_and_cwd_and_other_commands(tmp_path: Path) -> None:
    text, _, _ = BAD["bad-role"]
    (tmp_path / "storekit.toml").write_text(text)
    for args in (("config", "show"), ("config", "check"), ("status",), ("layout", "check")):
        proc = run(tmp_path, *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.startswith("error: storekit.toml: tiers.a.role: "), proc.stderr
        assert "Traceback" not in proc.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = run(elsewhere, "config", "show", env={"STOREKIT_CONFIG": str(tmp_path / "storekit.toml")})
    assert proc.returncode == 2 and "tiers.a.role" in proc.stderr
    proc = run(elsewhere, "config", "show", env={"STOREKIT_CONFIG": str(tmp_path / "missing.toml")})
    assert proc.returncode == 3 and "missing.toml" in proc.stderr


def test_unreachable_s3_endpoint_exit_5_masked(tmp_path: Path) -> None:
    port = closed_port()
    (tmp_path / "storekit.toml").write_text(
        f'[tiers.archive]\nurl = "s3://archive/storage"\nrole = "archive"\n[tiers.archive.options]\n'
        f'endpoint_url = "http://127.0.0.1:{port}"\nkey = "{KEY_ID}"\nsecret = "{SECRET}"\n'
    )
    started = time.monotonic()
    proc = run(tmp_path, "config", "check", "--json")  # errors go to stderr also under --json
    assert time.monotonic() - started < 60  # connection retries are bounded
    assert proc.returncode == 5, proc.stderr
    reach = f"error: tier archive: cannot reach http://127.0.0.1:{port} for s3://archive/storage"
    assert proc.stderr.startswith(reach)
    assert "hint:" in proc.stderr and "Traceback" not in proc.stderr
    tiers = one_json(proc)["tiers"]
    assert tiers[0]["reachable"] is False and f"127.0.0.1:{port}" in tiers[0]["error"]
    assert SECRET not in proc.stdout + proc.stderr and KEY_ID not in proc.stdout + proc.stderr


def test_unreachable_posix_mount_exit_5(tmp_path: Path) -> None:
    gone = tmp_path / "not-mounted" / "lustre"
    (tmp_path / "storage").mkdir()
    (tmp_path / "storekit.toml").write_text(
        f'[tiers.nvme]\nurl = "./storage"\n[tiers.lustre]\nurl = "{gone / "storage"}"\nrole = "parallel"\n'
    )
    proc = run(tmp_path, "config", "check", "--json")
    assert proc.returncode == 5
    tiers = {t["name"]: t for t in one_json(proc)["tiers"]}
    assert tiers["nvme"]["reachable"] is True and tiers["nvme"]["error"] is None
    assert tiers["lustre"]["reachable"] is False and str(gone) in tiers["lustre"]["error"]
    assert f"error: tier lustre: {(gone / 'storage').as_uri()} is not reachable" in proc.stderr
    assert "is the filesystem mounted?" in proc.stderr and "Traceback" not in proc.stderr
    ok = run(tmp_path, "config", "check", "--tier", "nvme")
    assert ok.returncode == 0 and "tier nvme" in ok.stdout and "reachable" in ok.stdout


S3_CAPS = {
    "atomic_rename": False,
    "directories": False,
    "posix_modes": False,
    "free_space": False,
    "user_metadata": True,
    "striping": False,
}


@pytest.mark.ceph
def test_check_real_ceph_bucket(tmp_path: Path) -> None:
    options = s3_options()
    bucket = f"sk-cfg-{uuid.uuid4().hex[:10]}"
    (tmp_path / "storekit.toml").write_text(
        f'[tiers.archive]\nurl = "s3://{bucket}/storage"\nrole = "archive"\n[tiers.archive.options]\n'
        f'endpoint_url = "{options["endpoint_url"]}"\n'
        f'key = "{options["key"]}"\nsecret = "{options["secret"]}"\n'
        f'[tiers.plain]\nurl = "s3://{bucket}/other"\n[tiers.plain.options]\n'
        f'endpoint_url = "{options["endpoint_url"]}"\n'
        f'key = "{options["key"]}"\nsecret = "{options["secret"]}"\n'
    )
    missing = run(tmp_path, "config", "check", "--tier", "archive")
    assert missing.returncode == 3 and f"bucket '{bucket}' does not exist" in missing.stderr
    assert options["secret"] not in missing.stdout + missing.stderr
    store = open_store(TierConfig(name="archive", url=f"s3://{bucket}/storage", options=options))
    store.makedirs("")
    try:
        ok = run(tmp_path, "config", "check", "--json")
        assert ok.returncode == 0, ok.stderr
        assert one_json(ok)["tiers"] == [
            {"name": name, "url": f"s3://{bucket}/{path}", "reachable": True, "error": None,
             "capabilities": S3_CAPS, "versioning": None}
            for name, path in (("archive", "storage"), ("plain", "other"))
        ]  # fmt: skip
        # versioning on: an archive tier is refused (deletes would keep the bytes), a plain one shown
        on = {"Status": "Enabled"}
        store.client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration=on)
        bad = run(tmp_path, "config", "check", "--json")
        assert bad.returncode == 1, bad.stderr
        endpoint = options["endpoint_url"]
        line = f"error: bucket {bucket} at {endpoint} has versioning Enabled: deletes would keep"
        assert bad.stderr.startswith(line) and "Traceback" not in bad.stderr
        tiers = {t["name"]: t for t in one_json(bad)["tiers"]}
        assert tiers["archive"]["reachable"] is True and "versioning Enabled" in tiers["archive"]["error"]
        assert tiers["plain"]["versioning"] == "Enabled" and tiers["plain"]["error"] is None
        text = run(tmp_path, "config", "check", "--tier", "plain")
        assert text.returncode == 0 and "bucket versioning: Enabled" in text.stdout
        assert "cannot: atomic_rename directories posix_modes free_space striping" in text.stdout
        assert options["secret"] not in bad.stdout + bad.stderr + text.stdout + text.stderr
    finally:
        remove_bucket(store, bucket)


def test_check_shows_probed_capabilities_per_tier(tmp_path: Path) -> None:
    """Two POSIX tiers on different file systems: each shows what its own file system can do."""
    (tmp_path / "disk").mkdir()
    ram = tmp_path / "ram"
    ram.mkdir()
    done = subprocess.run(["mount", "-t", "ramfs", "ramfs", str(ram)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a ramfs here ({done.stderr.strip()})")
    try:
        (tmp_path / "storekit.toml").write_text(
            '[tiers.disk]\nurl = "./disk/storage"\n[tiers.ram]\nurl = "./ram/storage"\n'
        )
        proc = run(tmp_path, "config", "check", "--json")
        assert proc.returncode == 0, proc.stderr
        tiers = {t["name"]: t for t in one_json(proc)["tiers"]}
        common = {"atomic_rename": True, "directories": True, "posix_modes": True, "striping": False}
        assert tiers["disk"]["capabilities"] == {**common, "free_space": True, "user_metadata": True}
        assert tiers["ram"]["capabilities"] == {**common, "free_space": False, "user_metadata": False}
        assert "versioning" not in tiers["disk"]
        assert not (tmp_path / "disk" / "storage").exists() and not (tmp_path / "ram" / "storage").exists()
        text = run(tmp_path, "config", "check", "--tier", "ram")
        assert "cannot: free_space user_metadata striping" in text.stdout, text.stdout
    finally:
        subprocess.run(["umount", "-l", str(ram)], check=True)
