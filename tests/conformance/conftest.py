"""The store conformance suite: every test here runs against a local directory, the real Ceph RGW
and a directory on the real CephFS (a shared file system as cluster nodes mount it).

Like fsspec's abstract tests, a test is written once against the `store` fixture, which is parametrised
over the backends; `store_pair` gives (source, destination) pairs across backends for copies. A third
backend, `noxattr`, is a POSIX directory on a file system without user xattrs (ramfs, mounted as root):
there a store must say it keeps no metadata, and refuse metadata rather than drop it.
"""

from __future__ import annotations

import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from storekit.config import TierConfig
from storekit.store import S3Store, Store, open_store
from storekit.store.s3client import s3_client
from tests.conftest import IN_CI, TwoMounts, remove_bucket, s3_options

BACKENDS = [
    "local",
    "noxattr",
    pytest.param("s3", marks=pytest.mark.ceph),
    pytest.param("cephfs", marks=pytest.mark.cephfs),
]


@pytest.fixture(scope="session")
def ramfs() -> Iterator[Path]:
    """A ramfs mount: no user xattrs and no free-space figure (the kernel offers both as a real fs)."""
    point = Path(tempfile.mkdtemp(prefix="sk-ramfs-"))
    done = subprocess.run(["mount", "-t", "ramfs", "ramfs", str(point)], capture_output=True, text=True)
    if done.returncode != 0:
        point.rmdir()
        why = f"cannot mount a ramfs here ({done.stderr.strip()})"
        pytest.fail(why) if IN_CI else pytest.skip(why)
    yield point
    subprocess.run(["umount", "-l", str(point)], check=False)
    point.rmdir()


@pytest.fixture
def noxattr_store(ramfs: Path) -> Store:
    root = ramfs / f"t-{uuid.uuid4().hex[:12]}" / "storage"
    store = open_store(TierConfig(name="noxattr", url=root.as_uri(), role="plain"))
    store.makedirs("")
    return store


def kept(store: Store, meta: dict[str, str]) -> dict[str, str]:
    """The metadata a test may pass: all of it where the store keeps metadata, none where it cannot."""
    return meta if store.capabilities.user_metadata else {}


@pytest.fixture
def cephfs_store(cephfs: TwoMounts) -> Store:
    store = open_store(TierConfig(name="cephfs", url=(cephfs.one / "storage").as_uri(), role="plain"))
    store.makedirs("")
    return store


@pytest.fixture(scope="session")
def shared_s3_client() -> Any:
    """One S3 client for the suite, as open_store makes it (store.s3client)."""
    return s3_client(s3_options())


def open_s3(tier: TierConfig, client: Any) -> S3Store:
    """What open_store(tier) builds, on the shared client."""
    return S3Store(tier, tier.url.removeprefix("s3://").rstrip("/"), client)


@pytest.fixture(scope="session")
def conformance_bucket(shared_s3_client: Any) -> Iterator[str]:
    """One bucket for the whole suite (creating and removing a bucket costs ~0.5 s on RGW)."""
    bucket = f"sk-conf-{uuid.uuid4().hex[:12]}"
    tier = TierConfig(name="conformance", url=f"s3://{bucket}", options=s3_options())
    store = open_s3(tier, shared_s3_client)
    store.makedirs("")
    yield bucket
    try:
        remove_bucket(store, bucket)
    except Exception as exc:  # cleanup must not hide the tests' own results
        print(f"warning: could not remove bucket {bucket}: {exc}")


@pytest.fixture
def s3_tier(conformance_bucket: str, shared_s3_client: Any) -> Iterator[TierConfig]:
    """Overrides the root fixture: a fresh prefix (not a fresh bucket) per test, removed afterwards."""
    prefix = f"t-{uuid.uuid4().hex[:12]}"
    url = f"s3://{conformance_bucket}/{prefix}/storage"
    tier = TierConfig(name="archive", url=url, role="archive", options=s3_options())
    store = open_s3(tier, shared_s3_client)
    store.makedirs("")
    yield tier
    remove_bucket(store, conformance_bucket, prefix + "/")  # the test may have removed everything itself


@pytest.fixture
def s3_store(s3_tier: TierConfig, shared_s3_client: Any) -> Store:
    return open_s3(s3_tier, shared_s3_client)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest) -> Store:
    """A fresh, empty store root on each backend."""
    result: Store = request.getfixturevalue(f"{request.param}_store")
    return result


@pytest.fixture
def make_store(tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[str], Store]:
    """A second, independent root on the backend `kind` ("local", "noxattr", "s3", or
    "cephfs"/"cephfs2": the real CephFS through its first or second mount, as two nodes see it)."""

    def make(kind: str) -> Store:
        if kind in ("local", "noxattr"):
            base = tmp_path if kind == "local" else request.getfixturevalue("ramfs")
            root = base / f"other-{uuid.uuid4().hex[:8]}"
            tier = TierConfig(name="other", url=root.as_uri(), role="plain")
        elif kind.startswith("cephfs"):
            shared: TwoMounts = request.getfixturevalue("cephfs")
            node = shared.two if kind == "cephfs2" else shared.one
            tier = TierConfig(
                name="other", url=(node / f"other-{uuid.uuid4().hex[:8]}").as_uri(), role="plain"
            )
        else:
            s3_tier: TierConfig = request.getfixturevalue("s3_tier")
            # same fresh bucket (removed after the test), another prefix
            url = f"{s3_tier.url}-other-{uuid.uuid4().hex[:6]}"
            tier = TierConfig(name="other", url=url, options=s3_tier.options)
            other: Store = open_s3(tier, request.getfixturevalue("shared_s3_client"))
            other.makedirs("")
            return other
        other = open_store(tier)
        other.makedirs("")
        return other

    return make


PAIRS = [
    pytest.param(("local", "local"), id="local-local"),
    pytest.param(("local", "noxattr"), id="local-noxattr"),
    pytest.param(("noxattr", "local"), id="noxattr-local"),
    pytest.param(("local", "s3"), id="local-s3", marks=pytest.mark.ceph),
    pytest.param(("s3", "local"), id="s3-local", marks=pytest.mark.ceph),
    pytest.param(("s3", "s3"), id="s3-s3", marks=pytest.mark.ceph),
    pytest.param(("local", "cephfs"), id="local-cephfs", marks=pytest.mark.cephfs),
    pytest.param(("cephfs", "local"), id="cephfs-local", marks=pytest.mark.cephfs),
    pytest.param(("cephfs", "cephfs2"), id="cephfs-node2", marks=pytest.mark.cephfs),
]


@pytest.fixture(params=PAIRS)
def store_pair(request: pytest.FixtureRequest, make_store: Callable[[str], Store]) -> tuple[Store, Store]:
    src_kind, dst_kind = request.param
    return make_store(src_kind), make_store(dst_kind)


def tree(store: Store, rel: str = "") -> list[tuple[str, bool, int | None]]:
    """(path, is_dir, size-for-files) of everything below `rel`, in walk order."""
    return [(e.path, e.is_dir, None if e.is_dir else e.size) for e in store.walk(rel)]
