"""Malformed storekit.toml files: ConfigError (exit 2) naming the file and the key, parsed directly."""

from __future__ import annotations

from pathlib import Path

import pytest

from storekit.config import embedded_default, load_config, mask_url, mask_value, parse_config
from storekit.errors import ConfigError, ExitCode, NotFoundError

# (name, file contents, the key the error must name or None, a phrase the message must contain)
BAD_CONFIGS = [
    ("bad-toml", '[tiers.a\nurl = "/x"\n', None, "invalid TOML"),
    ("not-utf8", b'[tiers.a]\nurl = "/\xff"\n', None, "not UTF-8"),
    ("unknown-top-key", 'colour = "blue"\n[tiers.a]\nurl = "/x"\n', "colour", "unknown key"),
    ("unknown-tier-key", '[tiers.a]\nurl = "/x"\nsize = 3\n', "tiers.a.size", "unknown key"),
    ("url-wrong-type", "[tiers.a]\nurl = 5\n", "tiers.a.url", "expected a string, got int"),
    ("url-missing", '[tiers.a]\nrole = "burst"\n', "tiers.a.url", "is required"),
    ("url-empty", '[tiers.a]\nurl = ""\n', "tiers.a.url", "expected a URL"),
    ("role-wrong-type", '[tiers.a]\nurl = "/x"\nrole = ["burst"]\n', "tiers.a.role", "expected a string"),
    ("bad-role", '[tiers.a]\nurl = "/x"\nrole = "fast"\n', "tiers.a.role", "burst, parallel, archive, plain"),
    ("options-not-table", '[tiers.a]\nurl = "/x"\noptions = "x"\n', "tiers.a.options", "expected a table"),
    ("no-tiers", 'default_tier = "a"\n', "tiers", "at least one tier"),
    ("tiers-not-table", "tiers = 3\n", "tiers", "at least one tier"),
    ("tier-not-table", "[tiers]\na = 1\n", "tiers.a", "expected a table"),
    ("bad-tier-name", '[tiers."1st"]\nurl = "/x"\n', "tiers.1st", "start with a letter"),
    ("unknown-default", 'default_tier = "b"\n[tiers.a]\nurl = "/x"\n', "default_tier", "unknown tier 'b'"),
    ("default-wrong-type", 'default_tier = 1\n[tiers.a]\nurl = "/x"\n', "default_tier", "expected a string"),
    ("layout-wrong-type", 'layout = 2\n[tiers.a]\nurl = "/x"\n', "layout", "expected a string"),
    ("gs-scheme", '[tiers.a]\nurl = "gs://bucket/x"\n', "tiers.a.url", "unsupported scheme 'gs'"),
    ("http-scheme", '[tiers.a]\nurl = "https://host/x"\n', "tiers.a.url", "unsupported scheme 'https'"),
    ("s3-no-bucket", '[tiers.a]\nurl = "s3:///x"\n', "tiers.a.url", "needs a bucket"),
    ("bad-url", '[tiers.a]\nurl = "s3://[bucket/x"\n', "tiers.a.url", "not a valid URL"),
    (
        "s3-option-typo",
        '[tiers.a]\nurl = "s3://b/x"\n[tiers.a.options]\nendpoint = "http://h:7480"\n',
        "tiers.a.options.endpoint",
        "unknown s3 option",
    ),
    (
        "s3-option-type",
        '[tiers.a]\nurl = "s3://b/x"\n[tiers.a.options]\nendpoint_url = 7480\n',
        "tiers.a.options.endpoint_url",
        "expected a string",
    ),
    (
        "s3-endpoint-not-url",
        '[tiers.a]\nurl = "s3://b/x"\n[tiers.a.options]\nendpoint_url = "127.0.0.1:7480"\n',
        "tiers.a.options.endpoint_url",
        "http(s)://host",
    ),
    (
        "s3-endpoint-bad-port",
        '[tiers.a]\nurl = "s3://b/x"\n[tiers.a.options]\nendpoint_url = "http://h:port"\n',
        "tiers.a.options.endpoint_url",
        "http(s)://host",
    ),
    ("transfer-not-table", '[tiers.a]\nurl = "/x"\ntransfer = 8\n', "tiers.a.transfer", "expected a table"),
    (
        "transfer-typo",
        '[tiers.a]\nurl = "s3://b/x"\n[tiers.a.transfer]\nbwlimit = "1GB"\n',
        "tiers.a.transfer.bwlimit",
        "unknown key; expected one of bandwidth, max_in_flight, retry_budget, threads",
    ),
    (
        "transfer-threads-float",
        '[tiers.a]\nurl = "s3://b/x"\n[tiers.a.transfer]\nthreads = 2.5\n',
        "tiers.a.transfer.threads",
        "expected a whole number of threads above 0, e.g. 8, got 2.5",
    ),
    (
        "transfer-bandwidth-words",
        '[tiers.a]\nurl = "s3://b/x"\n[tiers.a.transfer]\nbandwidth = "fast"\n',
        "tiers.a.transfer.bandwidth",
        "got 'fast'",
    ),
    (
        "transfer-budget-zero",
        '[tiers.a]\nurl = "s3://b/x"\n[tiers.a.transfer]\nretry_budget = "0s"\n',
        "tiers.a.transfer.retry_budget",
        "above 0",
    ),
    (
        "s3-endpoint-credentials",
        '[tiers.a]\nurl = "s3://b/x"\n[tiers.a.options]\nendpoint_url = "http://u:pw-zz9@h:7480"\n',
        "tiers.a.options.endpoint_url",
        "http://***@h:7480",
    ),
]


@pytest.mark.parametrize(("name", "text", "key", "phrase"), BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_bad_config(tmp_path: Path, name: str, text: str | bytes, key: str | None, phrase: str) -> None:
    path = tmp_path / "storekit.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    err = info.value
    assert err.exit_code == ExitCode.USAGE == 2
    assert err.file == str(path) and err.key == key
    assert str(err).startswith(f"{path}: {key}: " if key else f"{path}: ")
    assert phrase in str(err)
    assert "\n" not in str(err)
    assert "pw-zz9" not in str(err) + str(err.hint)


def test_bad_toml_names_the_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"line 3"):
        parse_config(b'[tiers.a]\nurl = "/x"\nrole = \n', source="site.toml", base_dir=tmp_path)


def test_valid_config_resolves(tmp_path: Path) -> None:
    text = b"""
default_tier = "lustre"
layout = "llm-cluster"
[tiers.nvme]
url = "./nvme"
role = "burst"
[tiers.lustre]
url = "file:///lustre/storage/"
role = "parallel"
[tiers.archive]
url = "s3://archive/storage/"
role = "archive"
layout = "other"
[tiers.archive.options]
endpoint_url = "http://rgw:7480"
key = "AKID"
secret = "s3cr3t"
client_kwargs = { region_name = "us-east-1" }
[tiers.archive.transfer]
threads = 16
max_in_flight = "1GiB"
bandwidth = "200MB"
retry_budget = "5m"
"""
    cfg = parse_config(text, source="site.toml", base_dir=tmp_path)
    assert cfg.default_tier == "lustre" and list(cfg.tiers) == ["nvme", "lustre", "archive"]
    assert cfg.tiers["nvme"].url == (tmp_path / "nvme").as_uri()  # relative to the config file
    assert cfg.tiers["lustre"].url == "file:///lustre/storage"
    assert cfg.tiers["archive"].url == "s3://archive/storage" and cfg.tiers["archive"].layout == "other"
    assert cfg.tiers["archive"].display_options() == {
        "endpoint_url": "http://rgw:7480",
        "key": "***",
        "secret": "***",
        "client_kwargs": {"region_name": "us-east-1"},
    }
    assert cfg.tiers["archive"].transfer == {
        "threads": 16,
        "max_in_flight": 1 << 30,
        "bandwidth": 200_000_000,
        "retry_budget": 300.0,
    }
    assert cfg.tiers["lustre"].transfer == {}
    assert cfg.tier(None).name == "lustre"
    with pytest.raises(NotFoundError, match="no tier named 'tape'"):
        cfg.tier("tape")


def test_masking() -> None:
    assert mask_url("s3://AKID:s3cr3t@bucket/x") == "s3://***@bucket/x"
    assert mask_url("http://user:pw@rgw:7480/") == "http://***@rgw:7480/"
    assert mask_url("http://rgw:7480") == "http://rgw:7480"
    assert mask_value("aws_secret_access_key", "s3cr3t") == "***"
    assert mask_value("token", "t") == "***"
    assert mask_value("endpoint_url", "http://u:p@h") == "http://***@h"
    assert mask_value("client_kwargs", {"aws_access_key_id": "AKID", "region_name": "r"}) == {
        "aws_access_key_id": "***",
        "region_name": "r",
    }


def test_missing_explicit_config_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError) as info:
        load_config(str(tmp_path / "nope.toml"))
    assert info.value.exit_code == 3


def test_embedded_default(tmp_path: Path) -> None:
    cfg = embedded_default(tmp_path)
    assert list(cfg.tiers) == ["local"] and cfg.tiers["local"].url == (tmp_path / "storage").as_uri()


def test_a_posix_tiers_local_root_is_its_path_decoded(tmp_path: Path) -> None:
    root = tmp_path / "my storage é"
    site = parse_config(f'[tiers.t]\nurl = "{root}"\n'.encode(), source="t.toml", base_dir=tmp_path)
    tier = site.tiers["t"]
    assert "%20" in tier.url and tier.local_root == str(root)
    s3 = parse_config(b'[tiers.a]\nurl = "s3://bucket/x"\n', source="t.toml", base_dir=tmp_path)
    assert s3.tiers["a"].local_root is None


def test_a_tiers_transfer_table_sets_its_transfer_engine(tmp_path: Path) -> None:
    from storekit.tier.dest import ARCHIVE_TRANSFER, tier_transfer

    text = b"""
[tiers.vault]
url = "s3://vault/storage"
role = "archive"
[tiers.vault.transfer]
threads = 4
max_in_flight = "256MiB"
bandwidth = "100MB"
retry_budget = "10m"
[tiers.plain]
url = "s3://other/storage"
"""
    cfg = parse_config(text, source="site.toml", base_dir=tmp_path)
    set_ = tier_transfer(cfg.tiers["vault"])
    assert (set_.threads, set_.max_in_flight_bytes, set_.bandwidth) == (4, 256 << 20, 100e6)
    assert set_.retry.budget_s == 600.0 and set_.retry.max_delay_s == ARCHIVE_TRANSFER.retry.max_delay_s
    assert set_.sign_payload is False and set_.min_part_size == ARCHIVE_TRANSFER.min_part_size
    assert tier_transfer(cfg.tiers["plain"]) == ARCHIVE_TRANSFER


def test_a_tier_url_takes_environment_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`${NAME}` (a node's own burst dir on a shared file system), `${NAME:-default}`; an unset
    NAME without a default is exit 2 naming the key; a bare `$` stays as written."""
    text = b'[tiers.b]\nurl = "./burst/${NODE_X}"\n[tiers.c]\nurl = "./c/${NODE_Y:-login}/$HOME"\n'
    monkeypatch.setenv("NODE_X", "sk-node3")
    monkeypatch.delenv("NODE_Y", raising=False)
    cfg = parse_config(text, source="site.toml", base_dir=tmp_path)
    assert cfg.tiers["b"].local_root == str(tmp_path / "burst/sk-node3")
    assert cfg.tiers["c"].local_root == str(tmp_path / "c/login/$HOME")
    monkeypatch.delenv("NODE_X")
    with pytest.raises(ConfigError) as info:
        parse_config(text, source="site.toml", base_dir=tmp_path)
    assert info.value.exit_code == ExitCode.USAGE
    assert "tiers.b.url" in info.value.message and "${NODE_X} is not set" in info.value.message
