"""Where a dataset lives: a tier-relative path, an absolute local path, or an `s3://` URL.

All three become (Store, rel) through `storekit.places`, so the rest of the code has one way to read
and write a dataset.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from storekit.config import SiteConfig
from storekit.errors import UsageError
from storekit.places import is_s3_url, resolve_place
from storekit.store import Store


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
    """A dataset's place (see `storekit.places`); it must name a directory below a root or bucket."""
    place = resolve_place(where, site, tier, what="dataset location")
    if not place.rel:
        if is_s3_url(where):
            raise UsageError(
                f"{where}: give a prefix inside the bucket, e.g. s3://bucket/datasets/text/NAME/v1"
            )
        if place.tier_name is None:
            raise UsageError("a dataset cannot be the file system root")
        raise UsageError("the dataset path is empty", hint="e.g. datasets/text/NAME/v1")
    return DatasetLocation(place.store, place.rel, place.tier_name)


def job_output(target: str, site: SiteConfig, tier: str | None) -> tuple[str, str | None]:
    """prepare's `locate` hook (kinds.py): the dataset TARGET names as a job records it, and where
    it is on this host (None on S3)."""
    location = resolve_location(target, site, tier)
    return location.display, location.local_path()
