"""What each pattern does, as a BenchPlan: files, sizes and phases per worker, for every sweep point.

shards      write W x files (fsync each), read them back shifted by one worker
checkpoint  N ranks write one file each (their share, or a sample of it), read back shifted by one rank
tokens      a data set written once (setup), then random windows at each queue depth for --duration
meta        per-worker and shared directories: create, stat, read, delete (S3: put, list, head, get, delete)
"""

from __future__ import annotations

from typing import Any

from storekit.bench.plan import (
    SMALL_FILE_ALLOC,
    BenchPlan,
    NameRange,
    PhasePlan,
    PointPlan,
    SetupPlan,
    WorkerTask,
    meta_names,
)
from storekit.bench.spec import BenchSpec


def peak_bytes(spec: BenchSpec) -> int:
    """The most bytes on the target at any moment: known from the spec alone, before any planning,
    so the free-space check comes first whatever the size."""
    peaks = [0]
    for pattern in spec.patterns:
        if pattern in ("shards", "tokens"):
            peaks.append(spec.shard_files * spec.file_size)
        elif pattern == "checkpoint":
            peaks.append(max(spec.checkpoint_rank_bytes(b) for b in spec.block_sizes) * spec.ranks)
        elif pattern == "meta":
            alloc = max(spec.small_file_size, SMALL_FILE_ALLOC)
            peaks.append(max(spec.workers) * spec.nodes * spec.files * alloc)
    return max(peaks)


def build_plan(spec: BenchSpec, run_id: str, run_root: str) -> BenchPlan:
    """`run_root`: the absolute run directory (POSIX) or key prefix (S3) the workers address.

    Its size is O(workers x sweep points), never O(files): names are ranges made on demand.
    """
    builder = _Builder(spec, run_root)
    points: list[PointPlan] = []
    setups: list[SetupPlan] = []
    for pattern in spec.patterns:
        if pattern == "shards":
            points += builder.shards()
        elif pattern == "checkpoint":
            points += builder.checkpoint()
        elif pattern == "tokens":
            setup, token_points = builder.tokens()
            setups.append(setup)
            points += token_points
        elif pattern == "meta":
            points += builder.meta()
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
        peak_bytes=peak_bytes(spec),
        notes=tuple(notes),
    )


class _Builder:
    def __init__(self, spec: BenchSpec, run_root: str) -> None:
        self.spec = spec
        self.run_root = run_root
        self.posix = spec.target.kind == "posix"

    def task(self, worker: int, op: str, *, per_node: int, **kw: Any) -> WorkerTask:
        return WorkerTask(
            worker=worker,
            op=op,
            node=worker // per_node,
            target=self.spec.target,
            run_root=self.run_root,
            seed=self.spec.seed * 1_000_003 + worker,
            **kw,
        )

    def data_phases(
        self, files: NameRange, workers: int, block: int, file_size: int
    ) -> tuple[PhasePlan, PhasePlan]:
        """A write phase (fsync inside the timed window) and a read phase shifted by one worker, or
        by one node's workers on several nodes. `workers` counts all nodes' workers."""
        per_node = max(workers // self.spec.nodes, 1)
        shift = per_node if self.spec.nodes > 1 else 1
        owned = [files[w::workers] for w in range(workers)]
        common = {"file_size": file_size, "block_size": block, "direct": self.direct, "per_node": per_node}
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
                self.task(w, "read", files=owned[(w + shift) % workers], **common) for w in range(workers)
            ),
        )
        return write, read

    @property
    def direct(self) -> bool:
        return self.spec.direct and self.posix

    def shards(self) -> list[PointPlan]:
        spec = self.spec
        names = NameRange("shards/shard_{:05d}.bin", 0, spec.shard_files)
        out = []
        for block in spec.block_sizes:
            for workers in spec.workers:
                write, read = self.data_phases(names, workers * spec.nodes, block, spec.file_size)
                out.append(
                    PointPlan(
                        pattern="shards",
                        params={"workers": workers, "block_size": block},
                        phases=(write, read),
                        dirs=("shards",),
                        names=(names,),
                    )
                )
        return out

    def checkpoint(self) -> list[PointPlan]:
        spec = self.spec
        names = NameRange("checkpoint/step_000001/rank_{:05d}.distcp", 0, spec.ranks)
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
                    names=(names,),
                )
            )
        return out

    def tokens(self) -> tuple[SetupPlan, list[PointPlan]]:
        spec = self.spec
        names = NameRange("tokens/shard_{:05d}.bin", 0, spec.shard_files)
        writers = min(max(spec.workers) * spec.nodes, len(names))
        setup_write, _ = self.data_phases(names, writers, spec.block_sizes[0], spec.file_size)
        setup = SetupPlan(pattern="tokens", phase=setup_write, dirs=("tokens",), names=(names,))
        out = []
        for workers in spec.workers:
            for qd in spec.queue_depths:
                tasks = tuple(
                    self.task(
                        w,
                        "randread",
                        per_node=workers,
                        files=names,
                        file_size=spec.file_size,
                        block_size=spec.window_bytes,
                        window=spec.window_bytes,
                        queue_depth=qd,
                        duration=spec.duration,
                        direct=self.direct,
                    )
                    for w in range(workers * spec.nodes)
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
        shift_nodes = spec.nodes > 1
        for per_node in spec.workers:
            workers = per_node * spec.nodes  # all nodes' workers
            shift = per_node if shift_nodes else 1
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
                    # each worker works on its own files when creating, a neighbour's (on another
                    # node when there are several) afterwards
                    tasks = tuple(
                        self.task(
                            w,
                            op,
                            per_node=per_node,
                            file_size=spec.small_file_size,
                            meta_dir=dir_of(owner),
                            meta_owner=owner,
                            meta_count=spec.files,
                        )
                        for w in range(workers)
                        for owner in [w if op == "create" else (w + shift) % workers]
                    )
                    phases.append(PhasePlan(name=meta_phase_name(op, self.posix), op=op, tasks=tasks))
                out.append(
                    PointPlan(
                        pattern="meta",
                        params={"workers": per_node, "dirs": mode, "files_per_worker": spec.files},
                        phases=tuple(phases),
                        dirs=((("meta-unique",) if mode == "unique" else ()) + dirs) if self.posix else (),
                        names=tuple(meta_names(dir_of(w), w, spec.files) for w in range(workers)),
                    )
                )
        return out


def meta_phase_name(op: str, posix: bool) -> str:
    names = {"create": "create", "stat": "stat", "readsmall": "read", "delete": "delete", "list": "list"}
    s3 = {"create": "put", "stat": "head", "readsmall": "get", "delete": "delete", "list": "list"}
    return (names if posix else s3)[op]
