"""probe: what `storekit config check`, `tier audit` and the tier's moves ask first. A reachable root
answers and nothing is written; a bucket that is not there is exit 3, a root whose file system is not
there (not mounted) exit 5."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from storekit.config import TierConfig
from storekit.errors import ExitCode, NotFoundError, UnreachableError
from storekit.store import S3Store, Store, open_store

from .conftest import tree


def test_probe_of_a_reachable_store_writes_nothing(store: Store) -> None:
    before = tree(store)
    store.probe()
    assert tree(store) == before


def test_probe_of_a_root_that_is_not_there(store: Store) -> None:
    if isinstance(store, S3Store):  # the same endpoint and keys, a bucket nobody made
        bucket = f"sk-gone-{uuid.uuid4().hex[:12]}"
        tier = TierConfig(name="gone", url=f"s3://{bucket}/storage", options=store.tier.options)
        gone: Store = S3Store(tier, f"{bucket}/storage", store.client)
        with pytest.raises(NotFoundError, match=f"tier gone: bucket '{bucket}' does not exist") as info:
            gone.probe()
        assert info.value.exit_code == ExitCode.NOT_FOUND
        return
    root = Path(store.local_path("") or "").parent / "not-mounted" / "here" / "storage"
    gone = open_store(TierConfig(name="gone", url=root.as_uri()))
    with pytest.raises(UnreachableError, match=r"tier gone: .* is not reachable") as info:
        gone.probe()
    assert info.value.exit_code == ExitCode.RETRYABLE and not root.parent.parent.exists()
