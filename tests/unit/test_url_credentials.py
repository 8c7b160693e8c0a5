"""Credentials in a URL (`s3://KEY:SECRET@bucket/prefix`) are refused by every command, with one line,
exit 2 and a hint naming the options and the environment, and never appear in any output or file.

Nothing here needs a reachable endpoint: the refusal comes before any connection is made (the
endpoint is a closed port, so a command that did try would fail with botocore's own words).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.core import TyperGroup
from typer.main import get_command

from storekit.cli.app import app
from storekit.cli.common import Command
from storekit.config import mask_url, redact_urls, url_has_credentials
from tests.conftest import run_cli, s3_options

KEY = "AKIDLEAKY77"
SECRET = "SeCrEtLeAk9x"
# An AWS secret may hold a '/': then the URL splits before the '@' and the "bucket" is KEY:SECRE
URLS = {
    "plain": f"s3://{KEY}:{SECRET}@bucket/storage",
    "slash": f"s3://{KEY}:{SECRET[:4]}/{SECRET[4:]}@bucket/storage",
    "key-only": f"s3://{KEY}@bucket/storage",
}
SECRET_PARTS = (KEY, SECRET, SECRET[4:])

COMMANDS = [
    ["init"],
    ["init", "--dry-run"],
    ["status"],
    ["layout", "check"],
    ["layout", "check", "--all"],
    ["layout", "show"],
    ["prepare", "dataset"],
    ["prepare", "dataset", "--dry-run"],
    ["dataset", "verify", "datasets/code/sample/v1"],
    ["dataset", "info", "datasets/code/sample/v1"],
    ["dataset", "list"],
    ["dataset", "inspect", "datasets/code/sample/v1"],
    ["dataset", "blend", "datasets/code/sample/v1"],
    ["layout", "clean"],
    ["layout", "clean", "--dry-run"],
    ["bench", "io", "--pattern", "meta", "--files", "10"],
    ["bench", "io", "--dry-run"],
    ["config", "show"],
    ["config", "check"],
    ["ckpt", "list", "run_001"],
    ["ckpt", "latest", "run_001"],
    ["ckpt", "verify", "run_001"],
    ["ckpt", "adopt", "run_001/step_000100"],
    ["ckpt", "adopt", "run_001/step_000100", "--dry-run"],
    ["ckpt", "prune", "run_001", "--keep-last", "1"],
    ["ckpt", "prune", "run_001", "--keep-last", "1", "--dry-run"],
    ["jobs", "status"],
    ["jobs", "status", "datasets/code/sample/v1"],
    ["jobs", "run-task", "work", "--task-ids", "0"],
    ["jobs", "finalize", "work"],
    ["jobs", "run-element", "work"],
    ["jobs", "rerun", "datasets/code/sample/v1", "--dry-run"],
    ["tier", "--archive", "checkpoints/run_001", "--dry-run"],
    ["tier", "--drain"],
    ["tier", "--recall", "checkpoints/run_001", "--dry-run"],
    ["tier", "verify"],
    ["tier", "verify", "checkpoints/run_001", "--sample", "0.5"],
    ["tier", "gc"],
    ["tier", "gc", "--dry-run"],
    ["version"],
]


def leaf_commands(command: Command, path: tuple[str, ...] = ()) -> set[str]:
    if isinstance(command, TyperGroup):
        own = {" ".join(path)} if path and command.invoke_without_command else set()
        subs = command.commands.items()
        return own | {leaf for name, sub in subs for leaf in leaf_commands(sub, (*path, name))}
    return {" ".join(path)}


# commands that read no config, tier or URL at all (they have no --config): nothing to refuse
NO_CONFIG = {"bench agent"}  # a node's part of bench io: gets its target from the coordinator


def test_every_command_is_in_this_test() -> None:
    covered = {" ".join(c[:n]) for c in COMMANDS for n in (1, 2)}
    missing = leaf_commands(get_command(app)) - covered - NO_CONFIG
    assert not missing, f"add {sorted(missing)} to COMMANDS in {__file__}: every command must refuse them"


def test_commands_without_config_take_no_config() -> None:
    root = get_command(app)
    assert isinstance(root, TyperGroup)
    for name in NO_CONFIG:
        group, leaf = name.split()
        sub = root.commands[group]
        assert isinstance(sub, TyperGroup)
        assert all("--config" not in p.opts for p in sub.commands[leaf].params), name


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STOREKIT_CONFIG", raising=False)
    yield tmp_path


def assert_no_secret(tmp: Path, *texts: str, skip: tuple[Path, ...] = ()) -> None:
    for text in texts:
        for part in SECRET_PARTS:
            assert part not in text, text
    for path in tmp.rglob("*"):
        if path.is_file() and path not in skip:
            data = path.read_bytes()
            for part in SECRET_PARTS:
                assert part.encode() not in data, path


def write_config(tmp: Path, url: str) -> Path:
    config = tmp / "storekit.toml"
    config.write_text(
        'default_tier = "archive"\n'
        f'[tiers.local]\nurl = "{tmp / "storage"}"\n'
        f'[tiers.archive]\nurl = "{url}"\n'
        f'[tiers.archive.options]\nendpoint_url = "http://127.0.0.1:{closed_port()}"\n'
    )
    return config


@pytest.mark.parametrize(
    ("form", "json_mode"), [("plain", False), ("plain", True), ("slash", True), ("key-only", False)]
)
@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_tier_url_with_credentials_is_refused_by_every_command(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], command: list[str], json_mode: bool, form: str
) -> None:
    config = write_config(in_tmp, URLS[form])
    args = [*command, "--config", str(config), *(["--json"] if json_mode else [])]
    res = run_cli(args, capsys)
    if command in (["layout", "show"], ["version"]) and res.code == 0:
        pass  # shows the layout / the version only: never reads a tier (the secret check below holds)
    else:
        assert res.code == 2, (res.code, res.stderr)
        assert "credentials in a URL are refused" in res.stderr
        assert "tiers.archive.url" in res.stderr and "AWS_ACCESS_KEY_ID" in res.stderr
        assert "s3://***@bucket/storage" in res.stderr
        assert "Traceback" not in res.stderr
        if json_mode:
            doc = json.loads(res.stdout)
            assert doc["error"]["exit_code"] == 2
    assert_no_secret(in_tmp, res.stdout, res.stderr, skip=(config,))
    assert not (in_tmp / "storage").exists()  # nothing was created or written anywhere


CLI_URLS = [
    ["prepare", "dataset", "--input", f"{URLS['plain']}/corpus.jsonl"],
    ["prepare", "dataset", f"--input={URLS['slash']}/corpus.jsonl", "--dry-run"],
    ["prepare", "dataset", "--output", f"{URLS['plain']}/datasets/text/x/v1"],
    ["prepare", "dataset", f"-i{URLS['plain']}/corpus.jsonl"],
    ["dataset", "verify", f"{URLS['plain']}/datasets/text/x/v1"],
    ["dataset", "info", f"{URLS['slash']}/datasets/text/x/v1"],
    ["bench", "io", "--target", URLS["plain"], "--pattern", "meta"],
    ["bench", "io", "--target", URLS["slash"], "--dry-run"],
    ["bench", "io", "--target", "s3://bucket/p", "--endpoint-url", f"http://{KEY}:{SECRET}@127.0.0.1:1"],
]


@pytest.mark.parametrize("json_mode", [False, True], ids=["human", "json"])
@pytest.mark.parametrize("command", CLI_URLS, ids=[f"{i}-{c[0]}" for i, c in enumerate(CLI_URLS)])
def test_command_line_url_with_credentials_is_refused(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], command: list[str], json_mode: bool
) -> None:
    res = run_cli([*command, *(["--json"] if json_mode else [])], capsys)
    assert res.code == 2, (res.code, res.stderr)
    assert res.stderr.startswith("error: command line: credentials in a URL are refused")
    assert "hint:" in res.stderr and "Traceback" not in res.stderr
    if json_mode:
        assert json.loads(res.stdout)["error"]["exit_code"] == 2
    assert_no_secret(in_tmp, res.stdout, res.stderr)


def test_pipeline_file_input_with_credentials_is_refused(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pipeline = in_tmp / "web.toml"
    pipeline.write_text(
        f'[dataset]\nname = "web"\n[input]\npaths = ["{URLS["slash"]}/a.jsonl"]\n[tokenizer]\npath = "x"\n'
    )
    res = run_cli(["prepare", "dataset", str(pipeline), "--json"], capsys)
    assert res.code == 2, res.stderr
    assert f"{pipeline}: input.paths: credentials in a URL are refused" in res.stderr
    assert_no_secret(in_tmp, res.stdout, res.stderr, skip=(pipeline,))


def test_an_unexpected_error_is_printed_with_urls_masked(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last line of defence: a bug's traceback (and --json's error) masks any URL's userinfo."""

    def broken(explicit: str | None = None) -> None:
        raise RuntimeError(f"botocore said: Could not connect to {URLS['slash']}/x")

    monkeypatch.setattr("storekit.cli.common.load_config", broken)
    res = run_cli(["status", "--json"], capsys)
    assert res.code == 1
    assert "Traceback" in res.stderr and "RuntimeError" in res.stderr and "s3://***@bucket" in res.stderr
    assert "internal error: RuntimeError" in json.loads(res.stdout)["error"]["message"]
    assert_no_secret(in_tmp, res.stdout, res.stderr)


def test_what_counts_as_credentials_in_a_url() -> None:
    for url in URLS.values():
        assert url_has_credentials(url)
        assert mask_url(url) == "s3://***@bucket/storage"
    assert url_has_credentials("http://u:p@rgw:7480")
    for clean in ("s3://bucket/p/user@example.com/x", "/data/a@b.jsonl", "file:///x", "s3://b", "rel/p"):
        assert not url_has_credentials(clean)
        assert mask_url(clean) == clean
    text = f"error: {URLS['slash']} and http://u:pw@h:1/x, not s3://b/k"
    assert redact_urls(text) == "error: s3://***@bucket/storage and http://***@h:1/x, not s3://b/k"


@pytest.mark.ceph
def test_working_credentials_in_a_url_are_refused_on_the_real_gateway(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Even keys that would work are refused in a URL, and never printed (real Ceph RGW)."""
    options = s3_options()
    key, secret = options["key"], options["secret"]
    config = in_tmp / "storekit.toml"
    config.write_text(
        f'[tiers.archive]\nurl = "s3://{key}:{secret}@bucket/storage"\n'
        f'[tiers.archive.options]\nendpoint_url = "{options["endpoint_url"]}"\n'
    )
    for command in (["init"], ["bench", "io", "--pattern", "meta"], ["status"]):
        res = run_cli([*command, "--config", str(config), "--json"], capsys)
        assert (
            res.code == 2 and "credentials in a URL are refused" in json.loads(res.stdout)["error"]["message"]
        )
        assert secret not in res.stdout + res.stderr and key not in res.stdout + res.stderr
    target = f"s3://{key}:{secret}@bucket/p"
    res = run_cli(["bench", "io", "--target", target, "--endpoint-url", options["endpoint_url"]], capsys)
    assert res.code == 2 and secret not in res.stdout + res.stderr
