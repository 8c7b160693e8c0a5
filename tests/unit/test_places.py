"""storekit.places: one resolver from "a string naming a place" to a store and a relative path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storekit.config import SiteConfig, parse_config
from storekit.errors import NotFoundError, UsageError
from storekit.places import resolve_place, tier_place, tier_relative
from storekit.store import PosixStore, S3Store


@pytest.fixture
def site(tmp_path: Path) -> SiteConfig:
    text = (
        f'[tiers.nvme]\nurl = "{tmp_path}/nvme"\n'
        '[tiers.archive]\nurl = "s3://arch/storage"\n'
        'options = { endpoint_url = "http://gw:7480", key = "AK", secret = "SK" }\n'
    )
    return parse_config(text.encode(), source="site.toml", base_dir=tmp_path)


def test_a_bare_relative_path_is_on_the_tier_and_one_from_the_cwd_is_local(
    site: SiteConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_tier = resolve_place("datasets/text/x/v1", site)
    assert (on_tier.tier_name, on_tier.rel) == ("nvme", "datasets/text/x/v1")
    assert on_tier.store.root == str(tmp_path / "nvme")
    monkeypatch.chdir(tmp_path)
    for spelling in ("./out/ds", "out/ds"):
        local = resolve_place(spelling, site, bare="cwd" if spelling == "out/ds" else "tier")
        assert isinstance(local.store, PosixStore) and local.tier_name is None
        assert os.path.join(local.store.root, local.rel) == str(tmp_path / "out" / "ds")


def test_a_local_path_inside_a_tier_is_on_that_tier_whatever_its_spelling(
    site: SiteConfig, tmp_path: Path
) -> None:
    (tmp_path / "nvme").mkdir()
    os.symlink(tmp_path / "nvme", tmp_path / "link")
    for spelling in (f"{tmp_path}/nvme/a/b", f"file://{tmp_path}/nvme/a/b", f"{tmp_path}/link/a/b"):
        place = resolve_place(spelling, site)
        assert (place.tier_name, place.rel) == ("nvme", "a/b"), spelling


def test_s3_urls_take_the_tier_they_are_in_else_the_options_of_their_bucket(site: SiteConfig) -> None:
    on_tier = resolve_place("s3://arch/storage/datasets/x", site)
    assert (on_tier.tier_name, on_tier.rel) == ("archive", "datasets/x")
    adhoc = resolve_place("s3://arch/other/x", site)
    assert isinstance(adhoc.store, S3Store) and adhoc.tier_name is None
    assert (adhoc.store.root, adhoc.rel) == ("arch/other", "x")
    assert adhoc.store.tier.options["key"] == "AK"  # the site's credentials for that bucket
    given = resolve_place("s3://bucket", site, s3_options={"endpoint_url": "http://other"})
    assert (given.store.root, given.rel) == ("bucket", "")
    assert dict(given.store.tier.options) == {"endpoint_url": "http://other"}


def test_a_tier_root_and_refusals(site: SiteConfig) -> None:
    root = tier_place(site, "archive")
    assert (root.tier_name, root.rel, root.display) == ("archive", "", "s3://arch/storage")
    with pytest.raises(UsageError, match="expected a directory, file:// or s3://"):
        resolve_place("gs://bucket/x", site, what="--target")
    with pytest.raises(UsageError, match="needs a bucket"):
        resolve_place("s3://", site)
    with pytest.raises(UsageError) as creds:
        resolve_place("s3://AK:SK@arch/x", site)
    assert "SK" not in creds.value.message


def test_a_tier_command_path_is_tier_relative_or_inside_a_posix_tier(tmp_path: Path) -> None:
    """`storekit tier` paths go through the same "which tier holds this path" as every other place
    (a root with a space in it: its URL holds %20, the path does not)."""
    root = tmp_path / "my lustre"
    (root / "checkpoints").mkdir(parents=True)
    text = f'[tiers.lustre]\nurl = "{root}"\n[tiers.archive]\nurl = "s3://arch/storage"\n'
    site = parse_config(text.encode(), source="site.toml", base_dir=tmp_path)
    assert tier_relative(site, "checkpoints/run_001/") == ("checkpoints/run_001", None)
    assert tier_relative(site, f"{root}/checkpoints/run_001") == ("checkpoints/run_001", "lustre")
    with pytest.raises(NotFoundError, match="not inside any tier"):
        tier_relative(site, str(tmp_path / "elsewhere"))
    with pytest.raises(UsageError, match="not a URL"):
        tier_relative(site, "s3://arch/storage/x")
    with pytest.raises(UsageError, match="name an area"):
        tier_relative(site, ".")


def test_a_file_url_is_spelled_the_same_way_on_the_command_line_and_in_the_config(tmp_path: Path) -> None:
    # file://localhost/abs and file://./rel mean what they mean in a site config's tier url
    site = parse_config(
        f'[tiers.t]\nurl = "file://localhost{tmp_path}/t"\n'.encode(), source="t.toml", base_dir=tmp_path
    )
    assert site.tiers["t"].local_root == str(tmp_path / "t")
    (tmp_path / "t" / "a").mkdir(parents=True)
    place = resolve_place(f"file://localhost{tmp_path}/t/a", site)
    assert (place.tier_name, place.rel) == ("t", "a")
    odd = tmp_path / "x#1"
    assert resolve_place(f"file://{odd}", None).display.endswith("/x#1")
