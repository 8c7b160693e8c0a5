"""One answer to "this string names a place": a local path, a `file://` or `s3://` URL, or a path on a tier.

Every command that takes a location (prepare's output and inputs, `dataset verify`, `bench io --target`)
resolves it here into a store and a path relative to that store's root, so the rules are the same
everywhere: a URL with credentials in it is refused, a place inside a configured tier is on that tier
(its options and credentials apply), anything else gets an ad-hoc store rooted at the place's parent.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from storekit.config import SiteConfig, TierConfig, refuse_url_credentials
from storekit.errors import UsageError
from storekit.store import Store, open_store


@dataclass(frozen=True)
class Place:
    store: Store
    rel: str  # relative to the store root; '' only for a bucket or the file system root
    tier_name: str | None  # the configured tier it is on, if any

    @property
    def display(self) -> str:
        return f"{self.store.display_url}/{self.rel}".rstrip("/")


def is_s3_url(where: str) -> bool:
    return where.startswith("s3://")


def s3_options_for(url: str, site: SiteConfig | None) -> dict[str, Any]:
    """Options (endpoint, credentials) for an `s3://` URL: the site's S3 tier on that bucket, else its
    first S3 tier, else none (boto3's own environment and config files)."""
    if site is None:
        return {}
    bucket = urlsplit(url).netloc
    s3_tiers = [t for t in site.tiers.values() if t.scheme == "s3"]
    for tier in s3_tiers:
        if urlsplit(tier.url).netloc == bucket:
            return dict(tier.options)
    return dict(s3_tiers[0].options) if s3_tiers else {}


def resolve_place(
    where: str,
    site: SiteConfig | None,
    tier: str | None = None,
    *,
    bare: Literal["tier", "cwd"] = "tier",
    s3_options: Mapping[str, Any] | None = None,
    what: str = "location",
) -> Place:
    """The store and relative path `where` names.

    `bare` says what a plain relative path ("datasets/x") is relative to: the tier (`tier`, or the
    site's default tier) or the current directory. `s3_options` replaces the site's options for an
    ad-hoc `s3://` place (bench's --endpoint-url).
    """
    refuse_url_credentials(where, what)
    if is_s3_url(where):
        return _s3_place(where, site, s3_options, what)
    if "://" in where and not where.startswith("file://"):
        raise UsageError(f"{what} {where!r}: expected a directory, file:// or s3://bucket/prefix")
    path = where.removeprefix("file://")
    if bare == "cwd" or site is None or os.path.isabs(path) or path.startswith(("./", "../", "~")):
        return _local_place(os.path.abspath(os.path.expanduser(path)), site)
    tier_cfg = site.tier(tier)
    store = open_store(tier_cfg)
    rel = path.strip("/")
    if rel:
        store.full(rel)  # validates: no '..', no absolute, no symlink escape
    return Place(store, rel, tier_cfg.name)


def tier_place(site: SiteConfig, tier: str | None) -> Place:
    """The root of a configured tier."""
    cfg = site.tier(tier)
    return Place(open_store(cfg), "", cfg.name)


def _local_place(path: str, site: SiteConfig | None) -> Place:
    """On a configured POSIX tier when it is inside one (symlinks resolved), else rooted at its parent."""
    real = Path(path).resolve()
    for cfg in site.tiers.values() if site else ():
        if cfg.scheme != "file":
            continue
        store = open_store(cfg)
        root = Path(store.root).resolve()
        if real != root and real.is_relative_to(root):
            return Place(store, real.relative_to(root).as_posix(), cfg.name)
    parent, name = os.path.split(path)
    adhoc = TierConfig(name="path", url=Path(parent or "/").as_uri())
    return Place(open_store(adhoc), name, None)


def _s3_place(url: str, site: SiteConfig | None, options: Mapping[str, Any] | None, what: str) -> Place:
    body = url[len("s3://") :].strip("/")
    if not body:
        raise UsageError(f"{what} {url!r} needs a bucket: s3://bucket/prefix")
    for cfg in site.tiers.values() if site and options is None else ():
        prefix = cfg.url[len("s3://") :].strip("/") if cfg.scheme == "s3" else None
        if prefix and body.startswith(prefix + "/"):
            return Place(open_store(cfg), body[len(prefix) + 1 :], cfg.name)
    head, _, name = body.rpartition("/")
    opts = dict(options) if options is not None else s3_options_for(url, site)
    adhoc = TierConfig(name="url", url=f"s3://{head or name}", options=opts)
    return Place(open_store(adhoc), name if head else "", None)
