"""`dataset verify` and `dataset info`: re-hash shards against the manifest, check every `.idx`.

Verify trusts no single field: every shard named in `shards[]` (bin, idx, meta) is checked whether or
not `files[]` lists it, the digests of the two lists must agree, and a file in the dataset that the
manifest does not list is reported. A manifest that cannot be read, or whose fields have the wrong
shape, is a mismatch (exit 4), as is a path in it that leaves the dataset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from storekit.errors import InputError, MismatchError, NotFoundError, NotRegularFileError, PathEscapeError
from storekit.manifest import MANIFEST_NAME, Manifest, ManifestFile, read_manifest, verify_manifest
from storekit.ops import hash_file
from storekit.paths import clean_rel, join_rel
from storekit.pipeline.indexed import BadIndexError, check_index, reader_from_file
from storekit.pipeline.location import DatasetLocation

_TABLES = ("dataset", "format", "tokenizer", "options", "splits", "stats")
_SHARD_FILES = (("bin", "xxh3_128"), ("idx", "idx_xxh3_128"), ("meta", None))


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

    def add(self, path: str, problem: str) -> None:
        self.problems.append({"path": path, "problem": problem})

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
    """The dataset's manifest, its fields checked for shape (MismatchError, exit 4, if not)."""
    source = f"{location.display}/{MANIFEST_NAME}"
    try:
        manifest = read_manifest(location.store, location.rel)
    except (InputError, PathEscapeError) as exc:
        raise MismatchError(exc.message) from None
    if manifest.kind != "dataset":
        raise NotFoundError(f"{location.display} holds a {manifest.kind} manifest, not a dataset")
    body = manifest.body
    for key in _TABLES:
        if key in body and not isinstance(body[key], dict):
            raise MismatchError(f"{source}: {key} is not a table ({type(body[key]).__name__})")
    if "shards" not in body:
        raise MismatchError(f"{source}: no shards list (every dataset manifest has one)")
    shards = body["shards"]
    if not isinstance(shards, list):
        raise MismatchError(f"{source}: shards is not a list ({type(shards).__name__})")
    for i, shard in enumerate(shards):
        problem = _shard_shape(shard)
        if problem:
            raise MismatchError(f"{source}: shards[{i}] {problem}")
    problem = _totals_disagree(body, shards) or _unsharded(manifest, shards)
    if problem:
        raise MismatchError(f"{source}: {problem}")
    return manifest


def _totals_disagree(body: dict[str, Any], shards: list[dict[str, Any]]) -> str | None:
    """splits{} and stats.tokens must add up from shards[]: a shard dropped from the list shows."""
    splits = body.get("splits")
    if splits is None:
        return None if not shards else "shards[] is not empty but there is no splits table"
    for shard in shards:
        if shard.get("split") not in splits:
            return f"shards[] entry {shard.get('name')!r} is in split {shard.get('split')!r}, not in splits"
    for name, split in splits.items():
        mine = [s for s in shards if s.get("split") == name]
        sums = {"shards": len(mine), "documents": sum(s["documents"] for s in mine)}
        sums["tokens"] = sum(s["tokens"] for s in mine)
        for key, total in sums.items():
            said = split.get(key) if isinstance(split, dict) else None
            if said != total:
                return f"splits.{name}.{key} is {said!r}, shards[] add up to {total}"
    stats = body.get("stats")
    tokens = stats.get("tokens") if isinstance(stats, dict) else None
    if tokens is not None and tokens != sum(s["tokens"] for s in shards):
        return f"stats.tokens is {tokens!r}, shards[] add up to {sum(s['tokens'] for s in shards)}"
    return None


def _unsharded(manifest: Manifest, shards: list[dict[str, Any]]) -> str | None:
    """Every shard file files[] lists (.bin, .idx) is in shards[]: none is left out of a blend."""
    named = {clean_rel(s[key]) for s in shards for key, _ in _SHARD_FILES if s.get(key) is not None}
    for f in manifest.files:
        if f.path.endswith((".bin", ".idx")) and f.path not in named:
            return f"files[] lists {f.path}, which no shards[] entry names"
    return None


def _shard_shape(shard: Any) -> str | None:
    if not isinstance(shard, dict):
        return "is not a table"
    for key in ("bin", "idx"):
        if not isinstance(shard.get(key), str):
            return f"has no {key} file name"
    if shard.get("meta") is not None and not isinstance(shard["meta"], str):
        return "has a meta that is not a file name"
    for key in ("documents", "tokens"):
        if type(shard.get(key)) is not int:
            return f"has no integer {key}"
    for key, _ in _SHARD_FILES:
        if shard.get(key) is not None:
            try:
                clean_rel(shard[key])
            except PathEscapeError as exc:
                return f"names a path outside the dataset ({exc.message})"
    return None


def verify_dataset(location: DatasetLocation, manifest: Manifest) -> VerifyReport:
    report = VerifyReport(dataset=location.display, files=len(manifest.files), bytes=manifest.total_bytes)
    _links(location, report, manifest)
    for problem in verify_manifest(location.store, location.rel, manifest):
        report.add(problem.path, problem.problem)
    listed = {f.path: f for f in manifest.files}
    dtype = (manifest.body.get("format") or {}).get("dtype")
    for shard in manifest.body.get("shards", []):
        report.shards += 1
        for key, digest_key in _SHARD_FILES:
            if shard.get(key) is not None:
                _cross_check(location, report, shard, clean_rel(shard[key]), digest_key, listed)
        shard_problem = _check_shard(location, shard, dtype)
        if shard_problem:
            report.add(shard["idx"], shard_problem)
    _unlisted(location, report, listed)
    return report


def _cross_check(
    location: DatasetLocation,
    report: VerifyReport,
    shard: dict[str, Any],
    name: str,
    digest_key: str | None,
    listed: dict[str, ManifestFile],
) -> None:
    """A file shards[] names: listed in files[] with the same digest, or re-hashed here against shards[]."""
    expected = shard.get(digest_key) if digest_key else None
    entry = listed.get(name)
    if entry is not None:
        if expected is not None and expected != entry.xxh3_128:
            report.add(name, f"shards[] says xxh3-128 {expected}, files[] says {entry.xxh3_128}")
        if digest_key == "xxh3_128" and shard.get("bytes") not in (None, entry.size):
            report.add(name, f"shards[] says {shard['bytes']} bytes, files[] says {entry.size}")
        return
    report.add(name, "named in shards[] but not listed in files[]")
    try:
        got = hash_file(location.store, join_rel(location.rel, name))
    except NotFoundError:
        report.add(name, "missing")
        return
    except PathEscapeError:
        report.add(name, "a symlink that leaves the tier")
        return
    report.files += 1
    report.bytes += got.size
    if expected is not None and got.xxh3_128 != expected:
        report.add(name, f"xxh3-128 {got.xxh3_128} != shards[] {expected}")


def _links(location: DatasetLocation, report: VerifyReport, manifest: Manifest) -> None:
    """A dataset holds regular files: a link (even inside the tier) reads someone else's bytes."""
    for f in manifest.files:
        try:
            entry = location.store.info(join_rel(location.rel, f.path))
        except (NotFoundError, PathEscapeError):
            continue  # reported by the re-hash
        if entry.is_link:
            report.add(f.path, "a symbolic link; a dataset holds regular files only")


def _unlisted(location: DatasetLocation, report: VerifyReport, listed: dict[str, ManifestFile]) -> None:
    prefix = location.rel + "/"
    try:
        entries = list(location.store.walk(location.rel))
    except NotFoundError:
        return
    for entry in entries:
        if entry.is_dir or not entry.path.startswith(prefix):
            continue
        name = entry.path[len(prefix) :]
        if name != MANIFEST_NAME and name not in listed:
            report.add(name, "in the dataset but not listed in the manifest")


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
    except PathEscapeError:
        return ".bin or .idx is a symlink that leaves the tier"
    except NotRegularFileError as exc:
        return exc.message
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
