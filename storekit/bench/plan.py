"""BenchPlan: which files each worker touches, how many bytes every phase moves, peak space needed.

A pure function of the spec and a run id; `--dry-run` prints it and writes nothing. Every name the run
may create is derived from the plan, so cleanup deletes exactly those and nothing else.

Read phases never read what the same process just wrote: each phase runs in fresh processes, and
worker w reads the files written by worker (w + 1) mod W.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

from storekit.bench.spec import BenchSpec, TargetSpec

RUN_PREFIX = "storekit-bench-"
SCRATCH = "scratch"
DATA_OPS = ("write", "read", "randread")
META_OPS = ("create", "stat", "list", "readsmall", "delete")
CREATING_OPS = ("write", "create")
READING_OPS = ("read", "randread", "stat", "readsmall", "list")
SPACE_MARGIN_FRACTION = 0.05
SPACE_MARGIN_BYTES = 64 * 1024 * 1024
SMALL_FILE_ALLOC = 4096
LABELS = {
    "workers": "w",
    "block_size": "bs",
    "queue_depth": "qd",
    "files_per_worker": "files",
    "window": "win",
}  # a small file occupies at least one filesystem block


@dataclass(frozen=True, kw_only=True)
class WorkerTask:
    """Everything one worker needs; with a start barrier it is all a worker is a function of."""

    worker: int
    op: str
    target: TargetSpec
    run_root: str  # posix: absolute run directory; s3: key prefix of the run
    files: tuple[str, ...] = ()  # data files, relative to run_root
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

    def meta_names(self) -> list[str]:
        return [meta_name(self.meta_dir, self.meta_owner, i) for i in range(self.meta_count)]

    def planned_bytes(self) -> int | None:
        if self.op in ("write", "read"):
            return len(self.files) * self.file_size
        if self.op == "randread":
            return None  # time-based: ops x window
        if self.op in ("create", "readsmall"):
            return self.meta_count * self.file_size
        return 0

    def created_paths(self) -> list[str]:
        if self.op == "write":
            return list(self.files)
        if self.op == "create":
            return self.meta_names()
        return []


def meta_name(directory: str, owner: int, index: int) -> str:
    return f"{directory}/w{owner:04d}.{index:08d}"


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
                    "files": list(t.files)[:4] + (["..."] if len(t.files) > 4 else []),
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

    @property
    def label(self) -> str:
        return " ".join(f"{LABELS.get(k, k)}={_short(v)}" for k, v in self.params.items())

    def created_paths(self) -> list[str]:
        return [p for ph in self.phases for t in ph.tasks for p in t.created_paths()]

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
        return int(self.peak_bytes * (1 + SPACE_MARGIN_FRACTION)) + SPACE_MARGIN_BYTES

    def created_paths(self) -> list[str]:
        """Every file name any phase may create, relative to the run directory."""
        paths = [p for s in self.setups for t in s.phase.tasks for p in t.created_paths()]
        paths += [p for point in self.points for p in point.created_paths()]
        return list(dict.fromkeys(paths))

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


def build_plan(spec: BenchSpec, run_id: str, run_root: str) -> BenchPlan:
    """`run_root`: the absolute run directory (POSIX) or key prefix (S3) the workers address."""
    builder = _Builder(spec, run_root)
    points: list[PointPlan] = []
    setups: list[SetupPlan] = []
    peaks = [0]
    for pattern in spec.patterns:
        if pattern == "shards":
            points += builder.shards()
            peaks.append(spec.shard_files * spec.file_size)
        elif pattern == "checkpoint":
            points += builder.checkpoint()
            peaks.append(max(spec.checkpoint_rank_bytes(b) for b in spec.block_sizes) * spec.ranks)
        elif pattern == "tokens":
            setup, token_points = builder.tokens()
            setups.append(setup)
            points += token_points
            peaks.append(spec.shard_files * spec.file_size)
        elif pattern == "meta":
            points += builder.meta()
            alloc = max(spec.small_file_size, SMALL_FILE_ALLOC)
            peaks.append(max(spec.workers) * spec.files * alloc)
    notes = []
    if "checkpoint" in spec.patterns and not spec.full_checkpoint:
        rank_bytes = spec.checkpoint_rank_bytes(spec.block_sizes[0])
        share = spec.model.checkpoint_bytes / spec.ranks
        if rank_bytes < share:
            notes.append(
                f"checkpoint: each rank writes a {rank_bytes / share:.2%} sample of its share; the "
                "verdict scales the measured bandwidth to the full model (--full-checkpoint writes it all)"
            )
    return BenchPlan(
        run_id=run_id,
        spec=spec,
        points=tuple(points),
        setups=tuple(setups),
        peak_bytes=max(peaks),
        notes=tuple(notes),
    )


class _Builder:
    def __init__(self, spec: BenchSpec, run_root: str) -> None:
        self.spec = spec
        self.run_root = run_root
        self.posix = spec.target.kind == "posix"

    def task(self, worker: int, op: str, **kw: Any) -> WorkerTask:
        return WorkerTask(
            worker=worker,
            op=op,
            target=self.spec.target,
            run_root=self.run_root,
            seed=self.spec.seed * 1_000_003 + worker,
            **kw,
        )

    def data_phases(
        self, files: list[str], workers: int, block: int, file_size: int
    ) -> tuple[PhasePlan, PhasePlan]:
        """A write phase (fsync inside the timed window) and a read phase shifted by one worker."""
        owned = [tuple(files[i] for i in range(w, len(files), workers)) for w in range(workers)]
        common = {"file_size": file_size, "block_size": block, "direct": self.direct}
        write = PhasePlan(
            name="write",
            op="write",
            tasks=tuple(
                self.task(w, "write", files=owned[w], fsync=self.posix, **common) for w in range(workers)
            ),
        )
        read = PhasePlan(
            name="read",
            op="read",
            tasks=tuple(
                self.task(w, "read", files=owned[(w + 1) % workers], **common) for w in range(workers)
            ),
        )
        return write, read

    @property
    def direct(self) -> bool:
        return self.spec.direct and self.posix

    def shards(self) -> list[PointPlan]:
        spec = self.spec
        names = [f"shards/shard_{i:05d}.bin" for i in range(spec.shard_files)]
        out = []
        for block in spec.block_sizes:
            for workers in spec.workers:
                write, read = self.data_phases(names, workers, block, spec.file_size)
                out.append(
                    PointPlan(
                        pattern="shards",
                        params={"workers": workers, "block_size": block},
                        phases=(write, read),
                        dirs=("shards",),
                    )
                )
        return out

    def checkpoint(self) -> list[PointPlan]:
        spec = self.spec
        names = [f"checkpoint/step_000001/rank_{r:05d}.distcp" for r in range(spec.ranks)]
        out = []
        for block in spec.block_sizes:
            rank_bytes = spec.checkpoint_rank_bytes(block)
            write, read = self.data_phases(names, spec.ranks, block, rank_bytes)
            out.append(
                PointPlan(
                    pattern="checkpoint",
                    params={"ranks": spec.ranks, "block_size": block, "model": spec.model.name},
                    phases=(write, read),
                    dirs=("checkpoint", "checkpoint/step_000001"),
                )
            )
        return out

    def tokens(self) -> tuple[SetupPlan, list[PointPlan]]:
        spec = self.spec
        names = tuple(f"tokens/shard_{i:05d}.bin" for i in range(spec.shard_files))
        writers = min(max(spec.workers), len(names))
        setup_write, _ = self.data_phases(list(names), writers, spec.block_sizes[0], spec.file_size)
        setup = SetupPlan(pattern="tokens", phase=setup_write, dirs=("tokens",))
        out = []
        for workers in spec.workers:
            for qd in spec.queue_depths:
                tasks = tuple(
                    self.task(
                        w,
                        "randread",
                        files=names,
                        file_size=spec.file_size,
                        block_size=spec.window_bytes,
                        window=spec.window_bytes,
                        queue_depth=qd,
                        duration=spec.duration,
                        direct=self.direct,
                    )
                    for w in range(workers)
                )
                out.append(
                    PointPlan(
                        pattern="tokens",
                        params={"workers": workers, "queue_depth": qd, "window": spec.window_bytes},
                        phases=(PhasePlan(name="randread", op="randread", tasks=tasks),),
                    )
                )
        return setup, out

    def meta(self) -> list[PointPlan]:
        spec = self.spec
        out = []
        ops = (
            ("create", "stat", "readsmall", "delete")
            if self.posix
            else ("create", "list", "stat", "readsmall", "delete")
        )
        for workers in spec.workers:
            for mode in ("unique", "shared"):
                dirs = (
                    ("meta-shared",)
                    if mode == "shared"
                    else tuple(f"meta-unique/w{w:04d}" for w in range(workers))
                )

                def dir_of(owner: int, mode: str = mode) -> str:
                    return "meta-shared" if mode == "shared" else f"meta-unique/w{owner:04d}"

                phases = []
                for op in ops:
                    # each worker works on its own files when creating, a neighbour's afterwards
                    tasks = tuple(
                        self.task(
                            w,
                            op,
                            file_size=spec.small_file_size,
                            meta_dir=dir_of(owner),
                            meta_owner=owner,
                            meta_count=spec.files,
                        )
                        for w in range(workers)
                        for owner in [w if op == "create" else (w + 1) % workers]
                    )
                    phases.append(PhasePlan(name=meta_phase_name(op, self.posix), op=op, tasks=tasks))
                out.append(
                    PointPlan(
                        pattern="meta",
                        params={"workers": workers, "dirs": mode, "files_per_worker": spec.files},
                        phases=tuple(phases),
                        dirs=((("meta-unique",) if mode == "unique" else ()) + dirs) if self.posix else (),
                    )
                )
        return out


def meta_phase_name(op: str, posix: bool) -> str:
    names = {"create": "create", "stat": "stat", "readsmall": "read", "delete": "delete", "list": "list"}
    s3 = {"create": "put", "stat": "head", "readsmall": "get", "delete": "delete", "list": "list"}
    return (names if posix else s3)[op]


def is_under(path: str, root: str) -> bool:
    path, root = posixpath.normpath(path), posixpath.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")
