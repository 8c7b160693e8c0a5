"""`plan_tasks`: split the input into tasks, as a pure function of the input files and the options.

The plan never depends on the number of workers, so the shards do not either. A task is a list of
pieces, each a slice of one source: a byte range of uncompressed jsonl (the task owns the lines that
start inside it), a row range of parquet/arrow, or a whole text file. Large files are split finer than
a file; small ones are packed together. Compressed jsonl is split too, but into at most
`MAX_COMPRESSED_SPLITS` tasks, since each task re-decompresses the file up to its start.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import xxhash

from storekit import __version__
from storekit.pipeline.formats import format_named
from storekit.pipeline.formats.base import Piece as Piece  # re-exported: a plan is made of pieces
from storekit.pipeline.formats.base import SourceFile
from storekit.pipeline.spec import PipelineSpec
from storekit.pipeline.tokenizer import TokenizerInfo

PLAN_FORMAT = 1  # bump when the shards a plan produces would change
MIN_TASK_BYTES = 1 << 20  # ~0.5 s of one core: per-task costs stay ~1% (commits run in the background)
MAX_TASK_BYTES = 64 << 20
TASKS_PER_CORPUS = 1024  # many more tasks than cores: the last ones finish close together


@dataclass(frozen=True)
class PrepTask:
    index: int
    pieces: tuple[Piece, ...]

    @property
    def est_bytes(self) -> int:
        return sum(p.est_bytes for p in self.pieces)


@dataclass(frozen=True, kw_only=True)
class PrepPlan:
    plan_id: str
    dataset: dict[str, str]  # name, kind, version
    output: str  # where the dataset goes, as given (tier-relative path, absolute path or URL)
    tokenizer: TokenizerInfo
    options: dict[str, Any]
    task_bytes: int
    sources: tuple[SourceFile, ...]
    tasks: tuple[PrepTask, ...]
    storekit_version: str = __version__

    @property
    def total_bytes(self) -> int:
        return sum(t.est_bytes for t in self.tasks)

    @property
    def max_output_bytes(self) -> int:
        """An upper bound of the shards' size, for the free-space check: a token stands for at least
        one byte of input (byte-level BPE; the JSON around a record pays for its EOS/BOS), plus BOS
        and EOS of a text file's single document. Real text averages 3.5-4.5 bytes a token, but
        some (CJK, code, digits) comes close to 1, so no such average is assumed."""
        itemsize = 2 if self.tokenizer.dtype == "uint16" else 4
        return (self.total_bytes + 2 * len(self.sources)) * itemsize

    def to_json(self) -> bytes:
        doc = {
            "plan_format": PLAN_FORMAT,
            "plan_id": self.plan_id,
            "dataset": self.dataset,
            "output": self.output,
            "tokenizer": self.tokenizer.to_dict(),
            "options": self.options,
            "task_bytes": self.task_bytes,
            "sources": [s.to_dict() for s in self.sources],
            "tasks": [[[p.source, p.start, p.end, p.est_bytes] for p in t.pieces] for t in self.tasks],
            "storekit_version": self.storekit_version,
        }
        return json.dumps(doc, indent=1).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes) -> PrepPlan:
        doc = json.loads(data)
        tasks = tuple(
            PrepTask(i, tuple(Piece(s, a, b, e) for s, a, b, e in pieces))
            for i, pieces in enumerate(doc["tasks"])
        )
        return cls(
            plan_id=doc["plan_id"],
            dataset=doc["dataset"],
            output=doc["output"],
            tokenizer=TokenizerInfo.from_dict(doc["tokenizer"]),
            options=doc["options"],
            task_bytes=doc["task_bytes"],
            sources=tuple(SourceFile.from_dict(s) for s in doc["sources"]),
            tasks=tasks,
            storekit_version=doc["storekit_version"],
        )


def choose_task_bytes(total: int) -> int:
    target = total // TASKS_PER_CORPUS
    return max(MIN_TASK_BYTES, min(MAX_TASK_BYTES, (target >> 20) << 20))


def split_source(index: int, src: SourceFile, target: int) -> list[Piece]:
    """Pieces of one source, each about `target` bytes of uncompressed input (its format decides how)."""
    return format_named(src.format).split(index, src, target)


def pack_pieces(pieces: Sequence[Piece], target: int) -> list[PrepTask]:
    """Consecutive small pieces share a task until it reaches the target size."""
    tasks: list[PrepTask] = []
    current: list[Piece] = []
    size = 0
    for piece in pieces:
        if current and size + piece.est_bytes > target:
            tasks.append(PrepTask(len(tasks), tuple(current)))
            current, size = [], 0
        current.append(piece)
        size += piece.est_bytes
    if current:
        tasks.append(PrepTask(len(tasks), tuple(current)))
    return tasks


def plan_id_for(spec: PipelineSpec, sources: Sequence[SourceFile], tokenizer: TokenizerInfo) -> str:
    """Identity of the result: same inputs (names, sizes) and options -> same id -> same shards."""
    doc = {
        "plan_format": PLAN_FORMAT,
        "dataset": [spec.name, spec.kind, spec.version],
        "sources": [[s.url, s.size, s.format, s.compression] for s in sources],
        "tokenizer": [tokenizer.xxh3_128, tokenizer.eos_id, tokenizer.bos_id],
        "options": spec.plan_options(),
        "task_bytes": spec.task_bytes,
    }
    return xxhash.xxh3_128_hexdigest(json.dumps(doc, sort_keys=True).encode("utf-8"))


def plan_tasks(spec: PipelineSpec, sources: Sequence[SourceFile], tokenizer: TokenizerInfo) -> PrepPlan:
    total = sum(s.data_size for s in sources)
    target = spec.task_bytes or choose_task_bytes(total)
    pieces = [piece for i, src in enumerate(sources) for piece in split_source(i, src, target)]
    return PrepPlan(
        plan_id=plan_id_for(spec, sources, tokenizer),
        dataset={"name": spec.name, "kind": spec.kind, "version": spec.version},
        output=spec.output_location,
        tokenizer=tokenizer,
        options=spec.plan_options(),
        task_bytes=target,
        sources=tuple(sources),
        tasks=tuple(pack_pieces(pieces, target)),
    )
