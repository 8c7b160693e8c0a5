"""`dataset list` and `dataset inspect`: the datasets on a tier, and documents decoded back to text.

`list` finds every `datasets/<kind>/<name>/<version>/` and reads its manifest; a version directory
without one is listed as uncommitted. "ok" means every file the manifest names is there with its
size (a stat each, cheap); `dataset verify` re-hashes the bytes.
"""

from __future__ import annotations

import struct
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from storekit.errors import MismatchError, NotFoundError, StorekitError, UsageError
from storekit.manifest import MANIFEST_NAME, Manifest, read_manifest
from storekit.paths import join_rel
from storekit.pipeline.indexed import CODE_DTYPES, HEADER_SIZE, MAGIC
from storekit.pipeline.location import DatasetLocation
from storekit.store import Store

DATASETS = "datasets"


@dataclass
class DatasetEntry:
    path: str  # tier-relative: datasets/<kind>/<name>/<version>
    kind: str
    name: str
    version: str
    state: str  # ok | incomplete | uncommitted | unreadable
    tokens: int | None = None
    documents: int | None = None
    shards: int | None = None
    bytes: int | None = None
    tokenizer: str | None = None
    created_at: str | None = None
    problem: str | None = None
    stub: dict[str, Any] | None = None  # archived or drained: where it went (storekit tier)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _dirs(store: Store, rel: str) -> list[str]:
    return [e.name for e in store.list(rel) if e.is_dir and not e.is_link and not e.name.startswith(".")]


def list_datasets(store: Store) -> list[DatasetEntry]:
    if not store.exists(DATASETS):
        raise NotFoundError(
            f"{store.display_url}/{DATASETS} does not exist", hint="storekit init creates the layout"
        )
    out = []
    for kind in _dirs(store, DATASETS):
        for name in _dirs(store, join_rel(DATASETS, kind)):
            versions = _dirs(store, join_rel(DATASETS, kind, name))
            for version in versions:
                out.append(_entry(store, join_rel(DATASETS, kind, name, version), kind, name, version))
            for version in _stubbed(store, join_rel(DATASETS, kind, name)):
                rel = join_rel(DATASETS, kind, name, version)
                if version in versions:  # the version and its stub: a move or recall not finished
                    entry = next(e for e in out if e.path == rel)
                    entry.stub = stub_state(store, rel)
                    entry.problem = entry.problem or "its stub stands beside it (a move not finished)"
                else:
                    out.append(_archived(store, rel, kind, name, version))
    return sorted(out, key=lambda e: (e.kind, e.name, e.version))


def _stubbed(store: Store, rel: str) -> list[str]:
    """Versions of a dataset with a stub (`<version>.storekit-stub`) where they were."""
    from storekit.stubs import is_stub_name, unit_rel_of

    return sorted(unit_rel_of(e.name) for e in store.list(rel) if not e.is_dir and is_stub_name(e.name))


def stub_state(store: Store, rel: str) -> dict[str, Any]:
    """What the stub of the dataset at `rel` says: where it went, when, its size; or why unreadable."""
    from storekit.stubs import parse_stub, stub_rel

    where = stub_rel(rel)
    try:
        stub = parse_stub(store.read_bytes(where), f"{store.display_url}/{where}")
    except StorekitError as exc:
        return {"state": "unreadable stub", "problem": exc.message}
    return {
        "state": stub.done_verb,
        "to_tier": stub.to_tier,
        "to_path": stub.to_path,
        "at": stub.at,
        "bytes": stub.bytes,
        "files": stub.files,
        "recall": f"storekit tier --recall {rel}",
    }


def _archived(store: Store, rel: str, kind: str, name: str, version: str) -> DatasetEntry:
    stub = stub_state(store, rel)
    entry = DatasetEntry(path=rel, kind=kind, name=name, version=version, state=str(stub["state"]), stub=stub)
    entry.bytes = stub.get("bytes")
    entry.problem = stub.get("problem")
    return entry


def _entry(store: Store, rel: str, kind: str, name: str, version: str) -> DatasetEntry:
    entry = DatasetEntry(path=rel, kind=kind, name=name, version=version, state="uncommitted")
    if not store.exists(join_rel(rel, MANIFEST_NAME)):
        entry.problem = f"no {MANIFEST_NAME}: half-written or not a storekit dataset"
        return entry
    try:
        manifest = read_manifest(store, rel)
    except StorekitError as exc:
        entry.state, entry.problem = "unreadable", exc.message
        return entry
    splits = manifest.body.get("splits") or {}
    entry.tokens = sum(int(s.get("tokens", 0)) for s in splits.values())
    entry.documents = sum(int(s.get("documents", 0)) for s in splits.values())
    entry.shards = len(manifest.body.get("shards", []))
    entry.bytes = manifest.total_bytes
    entry.tokenizer = (manifest.body.get("tokenizer") or {}).get("name")
    entry.created_at = manifest.body.get("created_at")
    entry.problem = _missing_or_resized(store, rel, manifest)
    entry.state = "incomplete" if entry.problem else "ok"
    return entry


def _missing_or_resized(store: Store, rel: str, manifest: Manifest) -> str | None:
    for f in manifest.files:
        try:
            size = store.info(join_rel(rel, f.path)).size
        except NotFoundError:
            return f"{f.path} is missing"
        if size != f.size:
            return f"{f.path} is {size} bytes, the manifest says {f.size}"
    return None


@dataclass(frozen=True)
class ShardIndex:
    dtype: str
    lengths: np.ndarray[Any, Any]
    pointers: np.ndarray[Any, Any]


def read_shard_index(location: DatasetLocation, idx_name: str) -> ShardIndex:
    data = location.store.read_bytes(join_rel(location.rel, idx_name))
    if data[:9] != MAGIC or len(data) < HEADER_SIZE:
        raise MismatchError(f"{location.display}/{idx_name}: not a Megatron index")
    dtype = CODE_DTYPES.get(data[17])
    if dtype is None:
        raise MismatchError(f"{location.display}/{idx_name}: unknown dtype code {data[17]}")
    (sequences,) = struct.unpack_from("<Q", data, 18)
    lengths = np.frombuffer(data, dtype="<i4", count=sequences, offset=HEADER_SIZE)
    pointers = np.frombuffer(data, dtype="<i8", count=sequences, offset=HEADER_SIZE + 4 * sequences)
    return ShardIndex(dtype, lengths, pointers)


def read_documents(
    location: DatasetLocation, shard: dict[str, Any], *, start: int, count: int
) -> list[tuple[int, list[int]]]:
    """Documents start..start+count-1 of a shard as token ids, read from the .bin by offset."""
    index = read_shard_index(location, shard["idx"])
    total = len(index.lengths)
    if start < 0 or start >= max(total, 1):
        raise UsageError(f"{shard['name']} has {total} documents; --start {start} is past the end")
    itemsize = np.dtype(index.dtype).itemsize
    docs = []
    with location.store.open_read(join_rel(location.rel, shard["bin"])) as fh:
        for i in range(start, min(start + count, total)):
            fh.seek(int(index.pointers[i]))
            raw = fh.read(int(index.lengths[i]) * itemsize)
            docs.append((i, np.frombuffer(raw, dtype=index.dtype).astype(np.int64).tolist()))
    return docs


def pick_shard(manifest: Manifest, name: str | None) -> dict[str, Any]:
    shards = manifest.body.get("shards", [])
    if not shards:
        raise NotFoundError("the dataset has no shards")
    if name is None:
        return dict(shards[0])
    for shard in shards:
        if name in (shard["name"], shard["bin"], shard["idx"]):
            return dict(shard)
    names = ", ".join(s["name"] for s in shards[:5])
    raise NotFoundError(
        f"no shard {name!r} in the dataset (shards: {names}{', ...' if len(shards) > 5 else ''})"
    )
