"""What an array element checks before it trusts the plan: the tokenizer copy and the sources.

The submitter copies the tokenizer into the work dir (a shared file system) so every node loads the
same bytes, even if the original is on a node's disk or is replaced meanwhile; an element loads that
copy only when its xxh3-128 is the plan's. At task start each source the task reads must still have
the size and mtime the plan recorded: a corpus changed under a running job would make shards that
match neither version.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import xxhash

from storekit.durable import write_file_atomic
from storekit.errors import InputError, MismatchError, NotFoundError
from storekit.pipeline.formats.base import SourceFile
from storekit.pipeline.inputs import InputFS
from storekit.pipeline.plan import PrepPlan
from storekit.pipeline.tokenizer import read_planned

TOKENIZER_COPY = "tokenizer.json"


def copy_tokenizer(plan: PrepPlan, work_path: Path) -> Path:
    """Write the plan's tokenizer (uncompressed) into the work dir, atomically; checked on the way."""
    text = read_planned(plan.tokenizer).encode("utf-8")
    target = work_path / TOKENIZER_COPY
    write_file_atomic(target, text, mode=0o600)
    return target


def with_tokenizer_copy(plan: PrepPlan, work_path: Path) -> PrepPlan:
    """The plan as an element uses it: the tokenizer loaded from the work dir copy, after its xxh3-128
    matched the plan's (exit 4 otherwise)."""
    copy = work_path / TOKENIZER_COPY
    try:
        data = copy.read_bytes()
    except FileNotFoundError:
        raise MismatchError(
            f"{copy} is missing: the work dir has no tokenizer copy",
            hint="resubmit with `storekit jobs rerun`",
        ) from None
    if xxhash.xxh3_128_hexdigest(data) != plan.tokenizer.xxh3_128:
        raise MismatchError(
            f"{copy}: xxh3-128 differs from the plan's tokenizer {plan.tokenizer.xxh3_128}",
            hint="the copy was damaged or replaced; remove the work dir and submit again",
        )
    return replace(plan, tokenizer=replace(plan.tokenizer, file=str(copy)))


def check_sources(plan: PrepPlan, task: int, fs: InputFS) -> None:
    """Every source task `task` reads has the size and mtime of the plan (exit 1 naming the file)."""
    wanted = {piece.source for piece in plan.tasks[task].pieces}
    for index in sorted(wanted):
        src = plan.sources[index]
        now = changed_since_planned(src, fs)
        if now is not None:
            size, mtime = now
            raise InputError(
                f"input {src.display} changed since it was planned (size {src.size} -> {size}"
                f"{'' if mtime == src.mtime else ', mtime changed'})",
                hint="restore the file, or plan again: cancel the job and rerun prepare without it",
            )


def changed_since_planned(src: SourceFile, fs: InputFS) -> tuple[int, float | None] | None:
    """The size and mtime of a source now, when they are not the plan's (None: unchanged; an mtime
    either side does not know proves nothing). Read through the input's store, as the plan listed
    it; a source that is gone is an InputError."""
    try:
        entry = fs.info(src.url)
    except NotFoundError:
        raise InputError(f"input {src.display} is gone since it was planned") from None
    if entry.size != src.size or (
        src.mtime is not None and entry.mtime is not None and entry.mtime != src.mtime
    ):
        return entry.size, entry.mtime
    return None
