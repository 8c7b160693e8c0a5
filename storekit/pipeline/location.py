"""Where a dataset lives: a tier-relative path, an absolute local path, or an `s3://` URL.

All three become (Store, rel) so the rest of the code has one way to read and write a dataset.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path

from storekit.config import SiteConfig, TierConfig, refuse_url_credentials
from storekit.errors import UsageError
from storekit.pipeline.inputs import s3_options_for
from storekit.store import Store, open_store


@dataclass(frozen=True)
class DatasetLocation:
    store: Store
    rel: str  # the dataset directory, relative to the store root (never empty)
    tier_name: str | None  # the configured tier it is on, if any

    @property
    def display(self) -> str:
        return f"{self.store.display_url}/{self.rel}"

    @property
    def parent(self) -> str:
        return posixpath.dirname(self.rel)

    @property
    def name(self) -> str:
        return posixpath.basename(self.rel)

    def local_path(self) -> str | None:
        return self.store.local_path(self.rel)


def resolve_location(where: str, site: SiteConfig, tier: str | None) -> DatasetLocation:
    refuse_url_credentials(where, "dataset location")
    if where.startswith("s3://"):
        return _s3_location(where, site)
    if where.startswith("file://"):
        where = where[len("file://") :]
    if os.path.isabs(where) or where.startswith(("./", "../", "~")):
        return _local_location(Path(os.path.expanduser(where)).resolve(), site)
    tier_cfg = site.tier(tier)
    store = open_store(tier_cfg)
    rel = where.strip("/")
    if not rel:
        raise UsageError("the dataset path is empty", hint="e.g. datasets/text/NAME/v1")
    store.full(rel)  # validates: no '..', no absolute, no symlink escape
    return DatasetLocation(store, rel, tier_cfg.name)


def _local_location(path: Path, site: SiteConfig) -> DatasetLocation:
    """An absolute path: on a configured POSIX tier when it is inside one, else rooted at its parent."""
    for cfg in site.tiers.values():
        if cfg.scheme != "file":
            continue
        store = open_store(cfg)
        root = Path(store.root).resolve()
        if path != root and path.is_relative_to(root):
            return DatasetLocation(store, path.relative_to(root).as_posix(), cfg.name)
    if path.parent == path:
        raise UsageError("a dataset cannot be the file system root")
    adhoc = TierConfig(name="path", url=path.parent.as_uri())
    return DatasetLocation(open_store(adhoc), path.name, None)


def _s3_location(url: str, site: SiteConfig) -> DatasetLocation:
    body = url[len("s3://") :].strip("/")
    for cfg in site.tiers.values():
        prefix = cfg.url[len("s3://") :].strip("/") if cfg.scheme == "s3" else None
        if prefix and body.startswith(prefix + "/"):
            return DatasetLocation(open_store(cfg), body[len(prefix) + 1 :], cfg.name)
    if "/" not in body:
        raise UsageError(f"{url}: give a prefix inside the bucket, e.g. s3://bucket/datasets/text/NAME/v1")
    head, name = body.rsplit("/", 1)
    adhoc = TierConfig(name="url", url=f"s3://{head}", options=s3_options_for(url, site))
    return DatasetLocation(open_store(adhoc), name, None)
