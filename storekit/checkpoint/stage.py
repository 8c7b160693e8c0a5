"""The commit API a training script calls: a checkpoint appears whole under its step name, or not at all.

    from storekit.checkpoint import commit

    with commit("/lustre/storage/checkpoints/run_001", step=1200) as stage:
        with stage.open("model.pt") as fh:      # hashed while torch.save writes it
            torch.save(model.state_dict(), fh)
        dcp.save(state, checkpoint_id=stage.path / "dcp")   # written by a library: hashed at the end

Files go into a staging directory beside the run's steps (`.step_001200.storekit-tmp-stage`, a name
`layout check` and `ckpt prune` know). On a clean exit each rank writes a partial manifest of what
it wrote; after the barrier, rank 0 merges them, hashes files no rank hashed, writes manifest.json
last, fsyncs, renames the stage to `step_001200` and replaces the run's `latest` pointer atomically.
An exception or a kill at any point leaves no directory under a step name, and `latest` names a
complete step throughout.

Multi-rank: pass `rank`, `world_size` and a `barrier` callable, or let storekit use
torch.distributed when the script has initialised it (never imported otherwise). The stage name is
a function of the step alone, so ranks on different nodes sharing a Lustre directory agree on it.
A rank whose block raises skips the barriers, so the others wait: end the job then, as a failed rank
of any torch.distributed job must (the stage stays behind and the next commit removes it). Only the
standard library, xxhash and storekit's own small modules (durable, digest, manifest) are imported.
"""

from __future__ import annotations

import contextlib
import json
import operator
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import xxhash

from storekit import faults
from storekit.digest import hash_local
from storekit.durable import fsync_dir, purge_tombstones, remove_tree, write_file_atomic
from storekit.manifest import MANIFEST_NAME, Manifest, ManifestFile

MANIFEST = MANIFEST_NAME
LATEST = "latest"
PART_PREFIX = ".storekit-part-"
STAGE_SUFFIX = ".storekit-tmp-stage"
_STEP_RE = re.compile(r"step_([0-9]+)")


class CommitError(Exception):
    """A commit that cannot proceed (step already committed, a rank's part missing)."""


def step_name(step: int) -> str:
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    return f"step_{step:06d}"


class HashingWriter:
    """A binary file that hashes what passes through it and is fsynced on close.

    Accepted wherever a writable binary file object is (torch.save, numpy.save, safetensors' bytes).
    """

    def __init__(self, path: Path, rel: str, done: Callable[[str, int, str], None]) -> None:
        self._fh = open(path, "wb")  # noqa: SIM115 -- closed in close()
        self._hash = xxhash.xxh3_128()
        self._size = 0
        self._rel = rel
        self._done = done
        self.name = str(path)

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._hash.update(view)
        self._fh.write(view)
        self._size += len(view)
        return len(view)

    def tell(self) -> int:
        return self._size

    def flush(self) -> None:
        self._fh.flush()

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False

    @property
    def closed(self) -> bool:
        return self._fh.closed

    def close(self) -> None:
        if self._fh.closed:
            return
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        self._done(self._rel, self._size, self._hash.hexdigest())
        faults.point("ckpt.commit.file-closed")

    def abort(self) -> None:
        self._fh.close()

    def __enter__(self) -> HashingWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class Stage:
    """The staging directory one rank writes into; `open` hashes in the same pass."""

    def __init__(self, path: Path, rank: int) -> None:
        self.path = path
        self.rank = rank
        self.files: dict[str, tuple[int, str]] = {}  # rel -> (size, xxh3-128) hashed by this rank
        self._open: set[str] = set()

    def open(self, rel: str) -> HashingWriter:
        target = self._target(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        self._open.add(rel)
        return HashingWriter(target, rel, self._record)

    def track(self, rel: str) -> None:
        """A file this rank wrote by other means: hash it (and fsync it) before the commit."""
        if rel not in self.files:
            self.files[rel] = self._hash_existing(self._target(rel))

    def _record(self, rel: str, size: int, digest: str) -> None:
        self._open.discard(rel)
        self.files[rel] = (size, digest)

    def _target(self, rel: str) -> Path:
        parts = [p for p in rel.split("/") if p not in ("", ".")]
        if not parts or ".." in parts or rel.startswith("/") or parts == [MANIFEST]:
            raise ValueError(f"{rel!r} is not a file name inside the checkpoint")
        return self.path.joinpath(*parts)

    @staticmethod
    def _hash_existing(path: Path) -> tuple[int, str]:
        digest = hash_local(path, fsync=True)
        return digest.size, digest.xxh3_128

    def finish_part(self) -> None:
        if self._open:
            raise CommitError(f"rank {self.rank}: files still open in the stage: {sorted(self._open)}")
        doc = {
            "rank": self.rank,
            "files": [{"path": p, "size": s, "xxh3_128": d} for p, (s, d) in self.files.items()],
        }
        write_file_atomic(self.path / f"{PART_PREFIX}{self.rank:05d}.json", json.dumps(doc).encode())
        faults.point("ckpt.commit.part-written")


def _torch_group() -> tuple[int, int, Callable[[], None]] | None:
    dist = sys.modules.get("torch.distributed")  # used only when the script already imported it
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist.get_rank(), dist.get_world_size(), dist.barrier


@contextlib.contextmanager
def commit(
    run_dir: str | os.PathLike[str],
    step: int,
    *,
    rank: int | None = None,
    world_size: int | None = None,
    barrier: Callable[[], None] | None = None,
    hash_threads: int = 4,
) -> Iterator[Stage]:
    """Stage a checkpoint for `step` in `run_dir`; commit it when the block exits cleanly.

    Every argument is checked before anything is written (a one-line ValueError naming it): `step`
    an integer >= 0 (numpy and torch integer scalars count; bool does not), `run_dir` a path that
    is a directory or does not exist yet."""
    run = _run_path(run_dir)
    step = _whole("step", step)
    if rank is not None:
        rank = _whole("rank", rank)
    if world_size is not None:
        world_size = _whole("world_size", world_size, least=1)
    if barrier is not None and not callable(barrier):
        raise ValueError(f"barrier must be a callable (e.g. torch.distributed.barrier), got {barrier!r}")
    hash_threads = _whole("hash_threads", hash_threads, least=1)
    rank, world, sync = _group(rank, world_size, barrier)
    name = step_name(step)
    final, stage_dir = run / name, run / f".{name}{STAGE_SUFFIX}"
    if rank == 0:
        _prepare(run, final, stage_dir, step)
    sync()  # the others start writing only once rank 0 has made a fresh stage
    stage = Stage(stage_dir, rank)
    try:
        yield stage
        stage.finish_part()
    except BaseException as exc:
        if rank == 0:
            with contextlib.suppress(OSError):
                remove_tree(stage_dir)
        _raise_no_space(exc, final)
        raise
    sync()
    if rank == 0:
        try:
            _merge_and_publish(run, stage_dir, final, step, world, hash_threads)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                remove_tree(stage_dir)
            _raise_no_space(exc, final)
            raise
    sync()  # nobody returns before the step is visible


def _raise_no_space(exc: BaseException, final: Path) -> None:
    """A full disk or quota anywhere in the commit (the script's writes too, also wrapped by a
    library) as storekit's NoSpaceError (exit_code 6) naming the area whose quota is full and its
    limit; the stage is already gone and nothing was committed."""
    from storekit.errors import NO_SPACE_ERRNOS, NoSpaceError, storage_error  # only on this path

    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno in NO_SPACE_ERRNOS:
            hint = "nothing was committed (`latest` unchanged): free space or raise the quota, commit again"
            err = storage_error(cause, f"checkpoint {final}", hints={NoSpaceError: hint})
            if err is not None:
                raise err from exc
        cause = cause.__cause__ or cause.__context__


def _whole(name: str, value: object, *, least: int = 0) -> int:
    """`value` as an int: Python ints and integer scalars of numpy or torch (via __index__), never a
    bool, a float or a string, whatever they would convert to."""
    dtype = str(getattr(value, "dtype", ""))
    if isinstance(value, bool) or "bool" in dtype or type(value).__name__ == "bool_":
        raise ValueError(f"{name} must be an integer >= {least}, got the bool {value!r}")
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, RuntimeError):
        shown = repr(value) if len(repr(value)) <= 40 else type(value).__name__
        raise ValueError(
            f"{name} must be an integer >= {least}, got {shown} ({type(value).__name__})"
        ) from None
    if number < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {number}")
    return number


def _run_path(run_dir: object) -> Path:
    if not isinstance(run_dir, (str, os.PathLike)) or not os.fspath(run_dir):
        raise ValueError(f"run_dir must be a directory path, got {run_dir!r}")
    run = Path(run_dir)
    if run.exists() and not run.is_dir():
        raise ValueError(f"run_dir {str(run)!r} exists and is not a directory")
    for parent in run.parents:  # a file where a parent directory belongs: mkdir would fail later
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"run_dir {str(run)!r}: {str(parent)!r} is not a directory")
            break
    return run


def _group(
    rank: int | None, world_size: int | None, barrier: Callable[[], None] | None
) -> tuple[int, int, Callable[[], None]]:
    if rank is None and world_size is None and barrier is None:
        torch_group = _torch_group()
        if torch_group is not None:
            return torch_group
        return 0, 1, lambda: None
    rank = 0 if rank is None else rank
    world = 1 if world_size is None else world_size
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is outside world_size {world}")
    if world > 1 and barrier is None:
        raise ValueError("world_size > 1 needs a barrier callable (e.g. torch.distributed.barrier)")
    return rank, world, barrier or (lambda: None)


def _prepare(run: Path, final: Path, stage_dir: Path, step: int) -> None:
    run.mkdir(parents=True, exist_ok=True)
    purge_tombstones(run)  # deletes a crash interrupted
    if final.exists():
        named = _read_latest(run)
        if named is not None and named >= step:
            raise CommitError(
                f"{final}: already committed and `latest` names step {named}; a step is never overwritten"
            )
        # committed before a crash that came before `latest` was updated: never resumable, replace it
        remove_tree(final)
    remove_tree(stage_dir)  # a killed earlier attempt at this step
    stage_dir.mkdir()
    fsync_dir(run)
    faults.point("ckpt.commit.staged")


def _read_latest(run: Path) -> int | None:
    try:
        text = (run / LATEST).read_text(encoding="utf-8").strip()
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    match = _STEP_RE.fullmatch(text)
    return int(match.group(1)) if match else None


def _merge_and_publish(run: Path, stage_dir: Path, final: Path, step: int, world: int, threads: int) -> None:
    files: dict[str, tuple[int, str]] = {}
    for r in range(world):
        part = stage_dir / f"{PART_PREFIX}{r:05d}.json"
        try:
            doc = json.loads(part.read_bytes())
        except FileNotFoundError:
            raise CommitError(f"{part}: rank {r} left no partial manifest (did it fail?)") from None
        for f in doc["files"]:
            files[f["path"]] = (int(f["size"]), str(f["xxh3_128"]))
    on_disk, dirs = _list_stage(stage_dir)
    unhashed = [rel for rel in on_disk if rel not in files]
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        digests = list(pool.map(lambda r: Stage._hash_existing(stage_dir / r), unhashed))
    files.update(zip(unhashed, digests, strict=True))
    missing = sorted(set(files) - set(on_disk))
    if missing:
        raise CommitError(f"{stage_dir}: a rank hashed {missing[0]} but it is not in the stage")
    for d in dirs:
        fsync_dir(d)
    faults.point("ckpt.commit.hashed")
    for r in range(world):
        (stage_dir / f"{PART_PREFIX}{r:05d}.json").unlink()
    manifest = Manifest(
        kind="checkpoint",
        files=tuple(ManifestFile(p, *files[p]) for p in sorted(files)),
        body={
            "writer": "storekit",
            "step": step,
            "ranks": world,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    )
    write_file_atomic(stage_dir / MANIFEST, manifest.to_json())
    fsync_dir(stage_dir)
    faults.point("ckpt.commit.manifest-written")
    os.rename(stage_dir, final)
    fsync_dir(run)
    faults.point("ckpt.commit.renamed")
    write_file_atomic(run / LATEST, (final.name + "\n").encode())
    fsync_dir(run)
    faults.point("ckpt.commit.latest-written")


def _list_stage(stage_dir: Path) -> tuple[list[str], list[Path]]:
    files, dirs = [], [stage_dir]
    for root, dirnames, filenames in os.walk(stage_dir):
        dirs.extend(Path(root) / d for d in dirnames)
        for fname in filenames:
            rel = os.path.relpath(os.path.join(root, fname), stage_dir).replace(os.sep, "/")
            if not (rel.startswith(PART_PREFIX) or rel == MANIFEST):
                files.append(rel)
    return sorted(files), dirs
