"""Tier policies: every bad rule is one line naming the file and the key, exit 2; good ones parse."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from storekit.config import parse_config
from storekit.errors import ConfigError
from storekit.layout.spec import parse_layout
from storekit.policies import resolve_policy
from tests.conftest import Ran
from tests.unit.tier.conftest import CONFIG, make_site

LAYOUTS = Path(__file__).parents[3] / "layouts"


def site_with(tmp_path: Path, body: str) -> str:
    text = CONFIG + body
    (tmp_path / "storekit.toml").write_text(text)
    return text


@pytest.mark.parametrize(
    ("body", "key", "words"),
    [
        ('action = "archive"\nolder_then = "30d"\n', "policies.p.older_then", "unknown key"),
        ('action = "shred"\n', "policies.p.action", "expected one of drain, archive, recall, purge"),
        ('action = "archive"\nolder_than = "soon"\n', "policies.p.older_than", "a duration"),
        ('action = "archive"\nlarger_than = "9GiB"\nsmaller_than = "1GiB"\n', "policies.p.smaller_than",
         "no unit could match"),
        ('action = "drain"\nhigh_watermark = "70%"\nlow_watermark = "80%"\n', "policies.p.low_watermark",
         "below high_watermark"),
        ('action = "drain"\nhigh_watermark = "90%"\n', "policies.p.low_watermark", "pairs"),
        ('action = "drain"\nhigh_watermark = "120%"\nlow_watermark = "80%"\n', "policies.p.high_watermark",
         "between 0% and 100%"),
        ('action = "archive"\nkeep_last = -1\n', "policies.p.keep_last", "≥ 0"),
        ('action = "archive"\nverify_max_age = "7d"\n', "policies.p.verify_max_age", "\"purge\" only"),
        ('action = "recall"\nolder_than = "7d"\n', "policies.p.older_than", "not a condition a recall"),
        ('action = "archive"\narea = "datasets"\nkeep_last = 2\n', "policies.p.keep_last",
         "checkpoint areas"),
        ('action = "archive"\nfrom = "lustre"\nto = "lustre"\n', "policies.p.to", "same tier"),
        ('action = "archive"\npaths = ["../etc"]\n', "policies.p.paths", "tier-relative globs"),
        ('action = "archive"\nfree_source = "yes"\n', "policies.p.free_source", "true or false"),
    ],
)  # fmt: skip
def test_a_bad_policy_is_one_line_naming_the_key_exit_2(
    tmp_path: Path, sk: Callable[..., Ran], body: str, key: str, words: str
) -> None:
    site_with(tmp_path, "[policies.p]\n" + body)
    for extra in ((), ("--json",)):
        ran = sk(tmp_path, "tier", "--policy", "p", "--dry-run", *extra)
        assert ran.code == 2, ran.stderr
        lines = [line for line in ran.stderr.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and f"storekit.toml: {key}" in lines[0] and words in lines[0], ran.stderr
        if extra:
            assert ran.json()["error"]["exit_code"] == 2  # type: ignore[index]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["storekit.toml"]  # nothing was created


def test_a_policy_naming_an_unknown_tier_or_a_missing_role_names_the_key(tmp_path: Path) -> None:
    site = make_site(tmp_path, '[policies.p]\naction = "archive"\nto = "tape"\n')
    with pytest.raises(ConfigError, match=r"policies\.p\.to: names unknown tier 'tape'"):
        resolve_policy(site.policies["p"], site)
    no_archive = CONFIG.replace('role = "archive"', 'role = "plain"') + '[policies.q]\naction = "archive"\n'
    site2 = parse_config(no_archive.encode(), source="s.toml", base_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"s\.toml: policies\.q\.to: not set, and no tier has role"):
        resolve_policy(site2.policies["q"], site2)


def test_watermarks_on_an_s3_tier_are_refused_with_the_reason(tmp_path: Path) -> None:
    text = (
        CONFIG.replace('url = "./lustre"', 'url = "s3://bucket/lustre"')
        + '[tiers.lustre.options]\nendpoint_url = "http://127.0.0.1:9"\n'
        + '[policies.full]\naction = "archive"\nhigh_watermark = "85%"\nlow_watermark = "70%"\n'
    )
    site = parse_config(text.encode(), source="s.toml", base_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"policies\.full\.high_watermark: tier lustre is S3"):
        resolve_policy(site.policies["full"], site)


def test_a_good_policy_resolves_its_tiers_by_role(tmp_path: Path) -> None:
    site = make_site(
        tmp_path,
        '[policies.old-runs]\naction = "archive"\nolder_than = "30d"\nidle_for = "7d"\nkeep_last = 2\n'
        'keep_every = 1000\nlarger_than = "1MiB"\npinned = ["checkpoints/run_007"]\n'
        '[policies.flush]\naction = "drain"\nhigh_watermark = "85%"\nlow_watermark = "60%"\n'
        '[policies.purge-archived]\naction = "purge"\nverify_max_age = "7d"\n',
    )
    old = resolve_policy(site.policies["old-runs"], site)
    assert (old.from_tier, old.to_tier) == ("lustre", "vault")
    p = old.policy
    assert (p.older_than_s, p.idle_for_s, p.keep_last, p.keep_every, p.larger_than, p.pinned) == (
        30 * 86400.0, 7 * 86400.0, 2, 1000, 1 << 20, ("checkpoints/run_007",)
    )  # fmt: skip
    flush = resolve_policy(site.policies["flush"], site)
    assert (flush.from_tier, flush.to_tier) == ("nvme", "lustre")
    assert (flush.policy.high_watermark, flush.policy.low_watermark) == (0.85, 0.60)
    assert resolve_policy(site.policies["purge-archived"], site).policy.verify_max_age_s == 7 * 86400.0


def test_a_layout_policy_is_checked_when_the_layout_loads(tmp_path: Path) -> None:
    text = (LAYOUTS / "llm-cluster.toml").read_text()
    extra = '\n[policies.old]\naction = "archive"\nolder_than = "90d"\n'
    good = parse_layout((text + extra).encode(), source="l")
    assert good.policies["old"].older_than_s == 90 * 86400.0
    with pytest.raises(ConfigError, match=r"^l: policies\.old\.area: names no area of this layout"):
        parse_layout((text + '\n[policies.old]\naction = "archive"\narea = "videos"\n').encode(), source="l")
    with pytest.raises(ConfigError, match=r"^l: policies\.old\.keep_lst: unknown key"):
        parse_layout((text + '\n[policies.old]\naction = "archive"\nkeep_lst = 1\n').encode(), source="l")
