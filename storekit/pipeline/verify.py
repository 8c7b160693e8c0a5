"""`dataset verify` and `dataset info`: re-hash shards against the manifest, check every `.idx`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from storekit.errors import NotFoundError
from storekit.manifest import Manifest, read_manifest, verify_manifest
from storekit.paths import join_rel
from storekit.pipeline.indexed import BadIndexError, check_index, reader_from_file
from storekit.pipeline.location import DatasetLocation


@dataclass
class VerifyReport:
    dataset: str
    files: int = 0
    shards: int = 0
    bytes: int = 0
    problems: list[dict[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "ok": self.ok,
            "files_checked": self.files,
            "shards_checked": self.shards,
            "bytes_checked": self.bytes,
            "problems": self.problems,
        }


def load_dataset_manifest(location: DatasetLocation) -> Manifest:
    manifest = read_manifest(location.store, location.rel)
    if manifest.kind != "dataset":
        raise NotFoundError(f"{location.display} holds a {manifest.kind} manifest, not a dataset")
    return manifest


def verify_dataset(location: DatasetLocation, manifest: Manifest) -> VerifyReport:
    report = VerifyReport(dataset=location.display, files=len(manifest.files), bytes=manifest.total_bytes)
    for problem in verify_manifest(location.store, location.rel, manifest):
        report.problems.append({"path": problem.path, "problem": problem.problem})
    dtype = (manifest.body.get("format") or {}).get("dtype")
    for shard in manifest.body.get("shards", []):
        report.shards += 1
        shard_problem = _check_shard(location, shard, dtype)
        if shard_problem:
            report.problems.append({"path": shard["idx"], "problem": shard_problem})
    return report


def _check_shard(location: DatasetLocation, shard: dict[str, Any], dtype: str | None) -> str | None:
    store = location.store
    bin_rel, idx_rel = join_rel(location.rel, shard["bin"]), join_rel(location.rel, shard["idx"])
    try:
        bin_size = store.info(bin_rel).size
        idx_size = store.info(idx_rel).size
        with store.open_read(idx_rel) as fh:
            info = check_index(reader_from_file(fh), idx_size, bin_size)
    except NotFoundError:
        return "missing .bin or .idx"
    except BadIndexError as exc:
        return f"index inconsistent with {shard['bin']}: {exc}"
    if dtype and info.dtype != dtype:
        return f"index dtype {info.dtype}, manifest says {dtype}"
    if info.sequences != shard["documents"] or info.tokens != shard["tokens"]:
        return (
            f"index has {info.sequences} documents / {info.tokens} tokens, "
            f"manifest says {shard['documents']} / {shard['tokens']}"
        )
    return None
