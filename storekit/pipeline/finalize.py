"""`finalize(plan)`: cross-task dedup, final shards, manifest last, then the dataset appears.

Runs once, after every task has its completion record. Where it writes and how the result becomes
visible is `commit.Staging`. Finalize can be killed and rerun at any point: it starts over from the
task parts, which stay in the work dir until success.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from storekit import faults
from storekit.errors import InputError, NoSpaceError, storage_errors
from storekit.lease import Lease
from storekit.manifest import Manifest, ManifestFile, write_manifest
from storekit.pipeline.commit import Staging
from storekit.pipeline.dedup import DropIndex, find_cross_task_duplicates
from storekit.pipeline.location import DatasetLocation
from storekit.pipeline.plan import PrepPlan
from storekit.pipeline.shards import ShardInfo, ShardSeries, ShardWriter
from storekit.pipeline.taskparts import read_task_array
from storekit.pipeline.workdir import WorkDir

SPLITS = ("train", "holdout")
MAX_MANIFEST_EXAMPLES = 10


def finalize(
    plan: PrepPlan,
    work: WorkDir,
    location: DatasetLocation,
    *,
    force: bool,
    source_digests: Callable[[], list[dict[str, Any]]],
    on_shard: Callable[[ShardInfo], None] | None = None,
    lease: Lease | None = None,
) -> Manifest:
    summaries = [work.read_done(i) for i in range(len(plan.tasks))]
    for index, summary in enumerate(summaries):
        work.check_parts(index, summary)
    drops = None
    if plan.options["dedup"]:
        drops = find_cross_task_duplicates(
            [work.at(f"tasks/{i:06d}/hashes.rec") for i in range(len(plan.tasks))], work.at("dedup")
        )
    staging = Staging(location, work, force=force, lease=lease)
    staging.begin()
    faults.point("finalize.staged")
    try:
        with _os_errors(location):
            shards = _write_shards(plan, work, staging, drops, on_shard)
            if not any(s.documents for s in shards) and not plan.options.get("allow_empty"):
                raise _nothing_kept(location, summaries, drops.count if drops else 0)
            manifest = build_manifest(
                plan,
                summaries,
                shards,
                drops.count if drops else 0,
                source_digests(),
                hf_documents=_hf_kept(summaries, drops),
                special_token_strings=_specials_kept(summaries, drops),
            )
            faults.point("finalize.before-manifest")
            work.check_pin()  # the parts came from the work dir this run made, not a swapped one
            write_manifest(staging.store, staging.rel, manifest)
            staging.commit(plan.plan_id)
    except BaseException:
        staging.abort()
        raise
    return manifest


def _nothing_kept(
    location: DatasetLocation, summaries: Sequence[dict[str, Any]], cross_dups: int
) -> InputError:
    """No document was kept (a typo'd --text-key, an empty input): publishing an empty dataset with
    exit 0 would hide it, so nothing is committed and the biggest reason is named."""
    stats = _stats(summaries, [], cross_dups, 0)
    reasons = {n.replace("_", " "): c for n, c in stats["errors"].items()}
    reasons["duplicate"] = stats["docs_duplicate"]
    reasons["shorter than min_chars"] = stats["filtered"]["too_short"]
    reasons["longer than max_chars"] = stats["filtered"]["too_long"]
    read = stats["docs_read"]
    top = max(reasons.items(), key=lambda kv: kv[1])
    if read == 0 or top[1] == 0:
        why = "the input holds no documents"
    else:
        why = f"{top[1]} of {read} skipped as {top[0]}"
        example = next((e for e in stats["error_examples"] if e["reason"].replace("_", " ") == top[0]), None)
        if example is not None:
            why += f" (first: {example['where']}: {example['detail']})"
    return InputError(
        f"{location.display}: no document was kept, nothing committed: {why}",
        hint="fix the input or options (--text-key, --min-chars, ...) and rerun; "
        "--allow-empty commits it anyway",
    )


def _hf_kept(summaries: Sequence[dict[str, Any]], drops: DropIndex | None) -> int:
    """Documents of the dataset the fast engine left to `tokenizers`: the same in every identical
    run (a task may skip a later task's duplicate it saw, depending on which worker ran what)."""
    total = 0
    for index, summary in enumerate(summaries):
        hf = set(summary.get("engine_hf_docs") or ())
        if hf and drops is not None:
            hf -= set(drops.for_task(index).tolist())
        total += len(hf)
    return total


def _specials_kept(summaries: Sequence[dict[str, Any]], drops: DropIndex | None) -> int | None:
    """Literal special-token strings in the documents the dataset keeps (like _hf_kept: the same in
    every identical run); None for completion records written before they were listed per document."""
    if any("special_token_docs" not in s for s in summaries):
        return None
    total = 0
    for index, summary in enumerate(summaries):
        docs = summary["special_token_docs"]
        if docs and drops is not None:
            dropped = set(drops.for_task(index).tolist())
            docs = [d for d in docs if d[0] not in dropped]
        total += sum(int(d[1]) for d in docs)
    return total


def _os_errors(location: DatasetLocation) -> contextlib.AbstractContextManager[None]:
    hint = "nothing was committed and the partial shards were removed; free space and rerun: "
    return storage_errors(f"writing {location.display}", hints={NoSpaceError: hint + _KEPT})


_KEPT = "finished tasks are kept in the work dir"


def _write_shards(
    plan: PrepPlan,
    work: WorkDir,
    staging: Staging,
    drops: DropIndex | None,
    on_shard: Callable[[ShardInfo], None] | None,
) -> list[ShardInfo]:
    dtype = np.dtype(plan.tokenizer.dtype)
    limit = plan.options["shard_tokens"] or max(1, plan.options["shard_bytes"] // dtype.itemsize)
    with_meta = bool(plan.options["keep_fields"])
    scratch = work.at("finalize")
    scratch.mkdir(exist_ok=True)
    closed = [0]

    def open_shard(split: str, name: str) -> ShardWriter:
        return ShardWriter(staging.store, staging.rel, name, split, plan.tokenizer.dtype, scratch, with_meta)

    def shard_closed(info: ShardInfo) -> None:
        closed[0] += 1
        if on_shard:
            on_shard(info)
        faults.point("finalize.shard-closed")

    splits = SPLITS if plan.options["holdout"] > 0 else SPLITS[:1]
    series = {name: ShardSeries(name, limit, open_shard) for name in splits}
    for s in series.values():
        s.on_close = shard_closed
    try:
        for index in range(len(plan.tasks)):
            _add_task(work, index, dtype, drops, series, with_meta)
        out: list[ShardInfo] = []
        for s in series.values():
            out.extend(s.close())
        return out
    except BaseException:
        for s in series.values():
            s.abort()
        raise


def _add_task(
    work: WorkDir,
    index: int,
    dtype: np.dtype,
    drops: DropIndex | None,
    series: dict[str, ShardSeries],
    with_meta: bool,
) -> None:
    folder = work.at(f"tasks/{index:06d}")  # through the work dir's held descriptor
    lengths = read_task_array(folder / "lengths.i32", np.int32)
    if not len(lengths):
        return
    tokens_path = folder / "tokens.bin"
    tokens = (
        np.memmap(tokens_path, dtype=dtype, mode="r") if tokens_path.stat().st_size else np.zeros(0, dtype)
    )
    keep = np.ones(len(lengths), dtype=bool)
    if drops is not None:
        keep[drops.for_task(index)] = False
    split_codes = read_task_array(folder / "split.u8", np.uint8) if "holdout" in series else None
    metas = (folder / "meta.jsonl").read_bytes().splitlines(keepends=True) if with_meta else None
    for code, s in enumerate(series.values()):
        mask = keep if split_codes is None else keep & (split_codes == code)
        if mask.all():
            s.add(tokens, lengths, metas)
        elif mask.any():
            picked = np.nonzero(mask)[0]
            s.add(
                tokens[np.repeat(mask, lengths)],
                lengths[mask],
                [metas[i] for i in picked] if metas is not None else None,
            )
    del tokens


def build_manifest(
    plan: PrepPlan,
    summaries: Sequence[dict[str, Any]],
    shards: Sequence[ShardInfo],
    cross_task_duplicates: int,
    sources: list[dict[str, Any]],
    *,
    hf_documents: int = 0,
    special_token_strings: int | None = None,
) -> Manifest:
    files = [ManifestFile(path=p, size=d.size, xxh3_128=d.xxh3_128) for s in shards for p, d in s.files()]
    tokenizer = plan.tokenizer.manifest_entry()
    # documents kept that the fast engine left to `tokenizers` (characters it cannot be sure of)
    tokenizer["engine"]["hf_documents"] = hf_documents
    body = {
        "dataset": plan.dataset,
        "plan_id": plan.plan_id,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "format": {"type": "megatron-indexed", "version": 1, "dtype": plan.tokenizer.dtype},
        "tokenizer": tokenizer,
        "sources": sources,
        "options": plan.options,
        "splits": _splits(shards),
        "shards": [s.manifest_entry() for s in shards],
        "stats": _stats(
            summaries,
            shards,
            cross_task_duplicates,
            sum(f.size for f in files),
            special_token_strings=special_token_strings,
        ),
    }
    return Manifest(kind="dataset", files=tuple(files), body=body)


def _splits(shards: Sequence[ShardInfo]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for s in shards:
        entry = out.setdefault(s.split, {"shards": 0, "documents": 0, "tokens": 0})
        entry["shards"] += 1
        entry["documents"] += s.documents
        entry["tokens"] += s.tokens
    return out


def _stats(
    summaries: Sequence[dict[str, Any]],
    shards: Sequence[ShardInfo],
    cross_dups: int,
    output_bytes: int,
    *,
    special_token_strings: int | None = None,
) -> dict[str, Any]:
    def total(key: str) -> int:
        return sum(int(s["stats"].get(key, 0)) for s in summaries)

    errors: dict[str, int] = {}
    examples: list[dict[str, str]] = []
    for s in summaries:
        for reason, n in s["stats"]["errors"].items():
            errors[reason] = errors.get(reason, 0) + int(n)
        examples.extend(s["stats"]["examples"][: MAX_MANIFEST_EXAMPLES - len(examples)])
    return {
        "docs_read": total("docs_read"),
        "docs_kept": sum(s.documents for s in shards),
        "docs_duplicate": total("duplicates") + cross_dups,
        "docs_filtered": total("filtered_short") + total("filtered_long"),
        "docs_malformed": sum(errors.values()),
        "filtered": {"too_short": total("filtered_short"), "too_long": total("filtered_long")},
        "errors": dict(sorted(errors.items())),
        "error_examples": examples,
        "tokens": sum(s.tokens for s in shards),
        # literal special-token strings inside documents: what they became is options.special_tokens
        "special_token_strings": total("special_token_strings")
        if special_token_strings is None
        else special_token_strings,
        "input_bytes": total("input_bytes"),
        "output_bytes": output_bytes,
        "tasks": len(summaries),
    }
