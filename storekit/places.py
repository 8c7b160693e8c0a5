"""One answer to "this string names a place": a local path, a `file://` or `s3://` URL, or a path on a tier.

Every command that takes a location (prepare's output and inputs, `dataset verify`, `bench io --target`)
resolves it here into a store and a path relative to that store's root, so the rules are the same
everywhere: a URL with credentials in it is refused, a place inside a configured tier is on that tier
(its options and credentials apply), anything else gets an ad-hoc store rooted at the place's parent.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from storekit.config import SiteConfig, TierConfig, file_url_spelled, refuse_url_credentials
from storekit.errors import NotFoundError, UsageError
from storekit.paths import resolves_outside
from storekit.rootprobe import guard_root
from storekit.store import Store, open_store
from storekit.store.posix import require_mounted


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
    path = file_url_spelled(where) if where.startswith("file://") else where
    if bare == "cwd" or site is None or os.path.isabs(path) or path.startswith(("./", "../", "~")):
        return _local_place(os.path.abspath(os.path.expanduser(path)), site)
    tier_cfg = site.tier(tier)
    store = open_store(tier_cfg)
    rel = path.strip("/")
    if tier_cfg.local_root is not None:  # before the first call on it: a stalled MDS is exit 5, no hang
        guard_root(tier_cfg.local_root, tier_cfg.name)
        require_mounted(tier_cfg, tier_cfg.local_root)  # nothing read or written beside the mount
    if rel:
        store.full(rel)  # validates: no '..', no absolute, no symlink escape
    return Place(store, rel, tier_cfg.name)


def tier_place(site: SiteConfig, tier: str | None) -> Place:
    """The root of a configured tier."""
    cfg = site.tier(tier)
    if cfg.local_root is not None:
        require_mounted(cfg, cfg.local_root)
    return Place(open_store(cfg), "", cfg.name)


def posix_tiers_holding(site: SiteConfig | None, path: str) -> Iterator[tuple[TierConfig, str]]:
    """The configured POSIX tiers whose root holds `path` (symlinks resolved), in the config's order,
    each with the path relative to its root ('' for the root itself)."""
    real = os.path.realpath(path)
    for cfg in site.tiers.values() if site else ():
        if cfg.local_root is None:
            continue
        root = os.path.realpath(cfg.local_root)
        if resolves_outside(real, root) is None:
            yield cfg, "" if real == root else os.path.relpath(real, root)


def tier_relative(site: SiteConfig, where: str) -> tuple[str, str | None]:
    """A path on the command line of `tier`: (tier-relative path, None) as given, or (path relative to
    its tier, that tier's name) when it is absolute (or ./, ../, ~) inside a configured POSIX tier."""
    if "://" in where:
        raise UsageError(f"{where}: give a path on a tier (checkpoints/run_001), not a URL")
    if where.startswith(("/", "./", "../", "~")):
        for cfg, rel in posix_tiers_holding(site, os.path.expanduser(where)):
            return posixpath.normpath(rel), cfg.name
        raise NotFoundError(f"{where}: not inside any tier of {site.source}")
    rel = posixpath.normpath(where.strip("/"))
    if rel in (".", "") or rel.startswith(".."):
        raise UsageError(f"{where}: name an area, a run or a unit (e.g. checkpoints/run_001)")
    return rel, None


def _local_place(path: str, site: SiteConfig | None) -> Place:
    """On a configured POSIX tier when it is inside one (symlinks resolved), else rooted at its parent."""
    guard_root(path, path)
    for cfg, rel in posix_tiers_holding(site, path):
        if rel:  # a tier's root itself is the ad-hoc place below
            require_mounted(cfg, cfg.local_root or path)
            return Place(open_store(cfg), Path(rel).as_posix(), cfg.name)
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
