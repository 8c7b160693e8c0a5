"""Which store a tier URL gets: one opener per URL scheme (the registry), and `open_store`."""

from __future__ import annotations

from collections.abc import Callable

from storekit.config import TierConfig
from storekit.errors import StorekitError
from storekit.store.base import Store
from storekit.store.posix import PosixStore
from storekit.store.s3 import S3Store


def _open_posix(tier: TierConfig) -> Store:
    root = tier.local_root
    assert root is not None  # SCHEMES sends only file:// tiers here
    return PosixStore(tier, root)


def _open_s3(tier: TierConfig) -> Store:
    root = tier.url[len("s3://") :].rstrip("/")
    return S3Store(tier, root)


# a new backend is one module and one line here
SCHEMES: dict[str, Callable[[TierConfig], Store]] = {"file": _open_posix, "s3": _open_s3}


def open_store(tier: TierConfig) -> Store:
    """The store for a tier; nothing is contacted until the first operation (or `probe`)."""
    opener = SCHEMES.get(tier.scheme)
    if opener is None:
        raise StorekitError(f"tier {tier.name}: unsupported URL scheme {tier.scheme!r}")
    return opener(tier)
