"""BenchPlan: which files each worker touches, how many bytes every phase moves, peak space needed.

`storekit.bench.patterns.build_plan` makes one from the spec and a run id; `--dry-run` prints it and
writes nothing. Every name the run may create is derived from the plan, so cleanup deletes exactly
those and nothing else.

Read phases never read what the same process just wrote: each phase runs in fresh processes, and
worker w reads the files written by worker (w + 1) mod W. Across nodes (`--nodes N`, W workers per
node) the shift is W: every worker reads what the same worker slot of the next node wrote, so no
node reads its own files back through its page cache.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from storekit.bench.spec import BenchSpec, TargetSpec

RUN_PREFIX = "storekit-bench-"
SCRATCH = "scratch"
DATA_OPS = ("write", "read", "randread")
READING_OPS = ("read", "randread", "stat", "readsmall", "list")
SPACE_MARGIN_FRACTION = 0.05
SPACE_MARGIN_BYTES = 64 * 1024 * 1024
SMALL_FILE_ALLOC = 4096  # a small file occupies at least one filesystem block
LABELS = {
    "workers": "w",
    "block_size": "bs",
    "queue_depth": "qd",
    "files_per_worker": "files",
    "window": "win",
}


@dataclass(frozen=True)
class NameRange(Sequence[str]):
    """File names `template.format(i)` for i in range(start, stop, step), made on demand.

    A plan holds one of these per worker, never a list of names: `--size 1P` is 33 million shard
    files, and the plan (and `--dry-run`) must stay a few kilobytes whatever the size.
    """

    template: str
    start: int
    stop: int
    step: int = 1

    def _range(self) -> range:
        return range(self.start, self.stop, self.step)

    def __len__(self) -> int:
        return len(self._range())

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        if isinstance(index, slice):
            picked = self._range()[index]
            return NameRange(self.template, picked.start, picked.stop, picked.step)
        return self.template.format(self._range()[index])

    def __iter__(self) -> Iterator[str]:
        return map(self.template.format, self._range())


@dataclass(frozen=True, kw_only=True)
class WorkerTask:
    """Everything one worker needs; with a start barrier it is all a worker is a function of."""

    worker: int
    op: str
    target: TargetSpec
    node: int = 0  # which node runs it (bench/cluster); 0 on one machine
    run_root: str  # posix: absolute run directory; s3: key prefix of the run
    files: Sequence[str] = ()  # data files, relative to run_root (a NameRange in plans)
    file_size: int = 0
    block_size: int = 0
    queue_depth: int = 1
    duration: float = 0.0  # > 0: time-based (randread)
    window: int = 0  # randread: bytes per training window
    direct: bool = False
    fsync: bool = False
    seed: int = 0
    meta_dir: str = ""  # meta ops: directory (or key prefix) relative to run_root
    meta_owner: int = 0  # meta ops: the worker whose files these are
    meta_count: int = 0

    def meta_names(self) -> NameRange:
        return meta_names(self.meta_dir, self.meta_owner, self.meta_count)

    def planned_bytes(self) -> int | None:
        if self.op in ("write", "read"):
            return len(self.files) * self.file_size
        if self.op == "randread":
            return None  # time-based: ops x window
        if self.op in ("create", "readsmall"):
            return self.meta_count * self.file_size
        return 0

    def created_names(self) -> Sequence[str]:
        """The names this task creates (a lazy range, not a list)."""
        if self.op == "write":
            return self.files
        if self.op == "create":
            return self.meta_names()
        return ()


def space_needed(peak_bytes: int) -> int:
    """Free space a run needs: its peak plus a margin for metadata and other writers."""
    return int(peak_bytes * (1 + SPACE_MARGIN_FRACTION)) + SPACE_MARGIN_BYTES


def meta_names(directory: str, owner: int, count: int) -> NameRange:
    return NameRange(f"{directory}/w{owner:04d}.{{:08d}}", 0, count)


def iter_names(groups: Sequence[Sequence[str]]) -> Iterator[str]:
    """Every name of the groups, each group once (sweep points and repeats reuse the same names)."""
    return itertools.chain.from_iterable(dict.fromkeys(g for g in groups if len(g)))


@dataclass(frozen=True, kw_only=True)
class PhasePlan:
    name: str
    op: str
    tasks: tuple[WorkerTask, ...]

    @property
    def bytes(self) -> int | None:
        sizes = [t.planned_bytes() for t in self.tasks]
        return None if any(s is None for s in sizes) else sum(s or 0 for s in sizes)

    @property
    def files(self) -> int:
        return sum(len(t.files) + t.meta_count for t in self.tasks)

    def to_dict(self) -> dict[str, Any]:
        first = self.tasks[0]
        return {
            "phase": self.name,
            "op": self.op,
            "workers": len(self.tasks),
            **({"nodes": len({t.node for t in self.tasks})} if self.tasks[-1].node else {}),
            "files": self.files,
            "bytes": self.bytes,
            "block_size": first.block_size or None,
            "queue_depth": first.queue_depth if self.op == "randread" else None,
            "duration_s": first.duration or None,
            "direct": first.direct,
            "fsync": first.fsync,
            "per_worker": [
                {
                    "worker": t.worker,
                    **({"node": t.node} if t.node or self.tasks[-1].node else {}),
                    "files": list(t.files[:4]) + (["..."] if len(t.files) > 4 else []),
                    "meta": f"{t.meta_dir}/w{t.meta_owner:04d}.* x{t.meta_count}" if t.meta_count else None,
                    "bytes": t.planned_bytes(),
                }
                for t in self.tasks
            ],
        }


@dataclass(frozen=True, kw_only=True)
class PointPlan:
    """One point of a sweep (e.g. shards with 4 workers and 1 MiB blocks): its phases, per repeat."""

    pattern: str
    params: dict[str, Any]
    phases: tuple[PhasePlan, ...]
    dirs: tuple[str, ...] = ()  # created (by the coordinator) before each repeat, removed after
    names: tuple[NameRange, ...] = ()  # every file the point may create (default: its tasks')

    @property
    def label(self) -> str:
        return " ".join(f"{LABELS.get(k, k)}={_short(v)}" for k, v in self.params.items())

    def created_groups(self) -> list[Sequence[str]]:
        return list(self.names) or [t.created_names() for ph in self.phases for t in ph.tasks]

    def created_paths(self) -> Iterator[str]:
        return iter_names(self.created_groups())

    def to_dict(self) -> dict[str, Any]:
        return {
            "pattern": self.pattern,
            "params": self.params,
            "dirs": list(self.dirs),
            "phases": [p.to_dict() for p in self.phases],
        }


@dataclass(frozen=True, kw_only=True)
class SetupPlan:
    """Data a pattern reads but does not time (the token data set), written once and removed after."""

    pattern: str
    phase: PhasePlan
    dirs: tuple[str, ...]
    names: tuple[NameRange, ...] = ()

    def created_groups(self) -> list[Sequence[str]]:
        return list(self.names) or [t.created_names() for t in self.phase.tasks]

    def created_paths(self) -> Iterator[str]:
        return iter_names(self.created_groups())


@dataclass(frozen=True, kw_only=True)
class BenchPlan:
    run_id: str
    spec: BenchSpec
    points: tuple[PointPlan, ...]
    setups: tuple[SetupPlan, ...] = ()
    peak_bytes: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def run_rel(self) -> str:
        return f"{SCRATCH}/{RUN_PREFIX}{self.run_id}"

    @property
    def space_needed(self) -> int:
        return space_needed(self.peak_bytes)

    def created_paths(self) -> Iterator[str]:
        """Every file name any phase may create, relative to the run directory, each once, lazily."""
        groups = [g for s in self.setups for g in s.created_groups()]
        groups += [g for point in self.points for g in point.created_groups()]
        return iter_names(groups)

    def created_dirs(self) -> list[str]:
        dirs = [d for s in self.setups for d in s.dirs] + [d for p in self.points for d in p.dirs]
        return list(dict.fromkeys(dirs))

    def total_bytes(self) -> int | None:
        """Bytes all timed phases move over all repeats (None when a phase is time-based)."""
        total = 0
        for point in self.points:
            for phase in point.phases:
                if phase.bytes is None:
                    return None
                total += phase.bytes * self.spec.repeat
        return total

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "run_dir": self.run_rel,
            "target": self.spec.target.display,
            "peak_bytes": self.peak_bytes,
            "space_needed_bytes": self.space_needed,
            "repeat": self.spec.repeat,
            "setups": [{"pattern": s.pattern, **s.phase.to_dict()} for s in self.setups],
            "points": [p.to_dict() for p in self.points],
            "notes": list(self.notes),
        }


def _short(value: Any) -> str:
    if isinstance(value, int) and value >= 1024 and value % 1024 == 0:
        for unit in ("K", "M", "G", "T"):
            value //= 1024
            if value < 1024 or value % 1024:
                return f"{value}{unit}"
    return str(value)
