"""`run_task(plan, index)`: read, check, dedup (within the task), tokenize and write one task's parts.

A task is self-contained: any process (a local worker, a Slurm array task) can run it from the plan
alone. Its parts appear under the work dir by rename, with `done.json` as the completion record:

    tokens.bin   all kept documents' ids back to back (the dataset dtype)
    lengths.i32  tokens per kept document
    hashes.rec   (hi, lo, doc) of each kept document's normalised-text xxh3-128, sorted by hash
    split.u8     1 for documents held out (only with a holdout fraction)
    meta.jsonl   kept fields, one line per kept document (only with keep_fields)
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from array import array
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from storekit import faults
from storekit.config import SiteConfig
from storekit.errors import InputError
from storekit.executors.base import Stopped
from storekit.executors.local import peak_rss
from storekit.jobs.workdir import DONE, io_errors, part_digest, remove_path
from storekit.pipeline.encode import Encoder, Unsplittable, stripped_hash
from storekit.pipeline.giant import BadText, measure, pieces
from storekit.pipeline.inputs import InputFS
from storekit.pipeline.plan import PrepPlan
from storekit.pipeline.readers import EMPTY, OVERSIZED, PieceReader
from storekit.pipeline.workdir import WorkDir

HASH_DTYPE = np.dtype([("hi", "<u8"), ("lo", "<u8"), ("doc", "<u4")])
BATCH_CHARS = 256 * 1024  # text per encode call: small batches keep the tokenizer's memory low
MAX_EXAMPLES = 5
MAX_PRIOR_HASHES = 1_000_000  # ~100 MB: a cache that only saves work, never changes the result
_LOW64 = (1 << 64) - 1
ProgressFn = Callable[[int, int, int], None]  # (docs, tokens, input bytes) since the last call
DoneFn = Callable[[int, dict[str, Any]], None]  # (task index, summary) once the task is committed


@dataclass
class TaskStats:
    docs_read: int = 0
    docs_kept: int = 0
    duplicates: int = 0
    filtered_short: int = 0
    filtered_long: int = 0
    tokens: int = 0
    input_bytes: int = 0
    special_token_strings: int = 0  # literal special-token text inside documents (either engine)
    errors: dict[str, int] = field(default_factory=dict)
    examples: list[dict[str, str]] = field(default_factory=list)


def holdout_flag(lo: int, fraction: float) -> int:
    """Deterministic: the low 32 bits of the document hash, as a fraction, below the holdout share."""
    return 1 if (lo & 0xFFFFFFFF) < fraction * 4294967296.0 else 0


class TaskRunner:
    def __init__(
        self,
        plan: PrepPlan,
        work: WorkDir,
        fs: InputFS,
        encoder: Encoder,
        *,
        background_commit: bool = False,
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        self.plan = plan
        self.should_stop = should_stop
        self._committer = (
            ThreadPoolExecutor(1, thread_name_prefix="storekit-commit") if background_commit else None
        )
        self._pending: list[Future[None]] = []
        self.work = work
        self.fs = fs
        self.encoder = encoder
        opts = plan.options
        self.dedup = bool(opts["dedup"])
        self.holdout = float(opts["holdout"])
        self.min_chars = opts["min_chars"]
        self.max_chars = opts["max_chars"]
        self.fail = opts["on_error"] == "fail"
        self.keep = tuple(opts["keep_fields"])
        # hash -> earliest task (plan order) that kept it, from tasks this process already ran: a copy
        # in a later task is dropped at finalize anyway, so it need not be tokenized at all
        self.prior: dict[int, int] = {}

    def run(
        self, index: int, progress: ProgressFn | None = None, done: DoneFn | None = None
    ) -> dict[str, Any]:
        """Run task `index`; `done(index, summary)` is called once its completion record exists.

        With a background committer the commit (fsync, rename) overlaps the next task, so a core never
        waits on the disk; errors of a background commit surface at the next run() or at drain().
        """
        self._reap()
        started = time.perf_counter()
        enc0, ids0 = self.encoder.encode_seconds, self.encoder.ids_seconds
        specials0, hf0 = self.encoder.special_strings, self.encoder.hf_documents
        tmp = self.work.new_task_dir(index)
        try:
            with io_errors(tmp):
                stats = self._run(index, tmp, progress or (lambda d, t, b: None))
                stats.special_token_strings = self.encoder.special_strings - specials0
                summary = {
                    "task": index,
                    "plan_id": self.plan.plan_id,
                    "stats": stats.__dict__,
                    # where the time went: the tokenizer, ids -> numpy, everything else (read, parse,
                    # hash, write); the commit (fsync, rename) runs after `seconds`
                    "encode_seconds": round(self.encoder.encode_seconds - enc0, 4),
                    "ids_seconds": round(self.encoder.ids_seconds - ids0, 4),
                    "engine": self.encoder.info.engine,
                    "engine_hf_documents": self.encoder.hf_documents - hf0,
                    "seconds": round(time.perf_counter() - started, 4),
                    "peak_rss": peak_rss(),
                    # what finalize checks before using a part (size, xxh3-128)
                    "parts": {
                        p.name: list(astuple(part_digest(p))) for p in sorted(tmp.iterdir()) if p.name != DONE
                    },
                }
                (tmp / DONE).write_bytes(json.dumps(summary, indent=1).encode("utf-8"))
                faults.point("prepare.task-written")
        except BaseException:
            remove_path(tmp)
            raise
        if self._committer is None:
            self._commit(tmp, index, summary, done)
        else:
            self._pending.append(self._committer.submit(self._commit, tmp, index, summary, done))
        return summary

    def _commit(self, tmp: Path, index: int, summary: dict[str, Any], done: DoneFn | None) -> None:
        try:
            self.work.commit_task(tmp, index)
        except BaseException:
            remove_path(tmp)
            raise
        if done is not None:
            done(index, summary)

    def _reap(self) -> None:
        finished = [f for f in self._pending if f.done()]
        self._pending = [f for f in self._pending if not f.done()]
        for future in finished:
            future.result()  # re-raises a failed commit here, in the caller's thread

    def drain(self) -> None:
        """Wait for background commits; raise the first failure."""
        for future in self._pending:
            future.result()
        self._pending = []

    def _run(self, index: int, tmp: Path, progress: ProgressFn) -> TaskStats:
        stats = TaskStats()
        encoder = self.encoder
        need_hash = self.dedup or self.holdout > 0
        seen: set[int] = set()
        hashes_hi, hashes_lo = array("Q"), array("Q")
        splits = array("B")
        lengths = array("i")
        batch: list[str] = []
        batch_chars = 0
        pending = [0, 0]  # docs, bytes not yet reported
        opts = self.plan.options
        with (
            open(tmp / "tokens.bin", "wb") as tokens_fh,
            _maybe_open(tmp / "meta.jsonl", bool(self.keep)) as meta_fh,
        ):

            def write_tokens(ids: np.ndarray) -> None:
                tokens_fh.write(ids.data)

            def flush() -> None:
                nonlocal batch, batch_chars
                if self.should_stop is not None and self.should_stop():
                    raise Stopped
                if batch:
                    tokens, lens = encoder.encode_batch(batch)
                    tokens_fh.write(tokens.data)
                    lengths.extend(lens)
                    stats.tokens += len(tokens)
                    progress(pending[0], len(tokens), pending[1])
                    pending[0] = pending[1] = 0
                    batch, batch_chars = [], 0

            for piece in self.plan.tasks[index].pieces:
                src = self.plan.sources[piece.source]
                reader = PieceReader(
                    self.fs,
                    src,
                    piece,
                    text_key=opts["text_key"],
                    keep_fields=self.keep,
                    max_doc_bytes=opts["max_doc_bytes"],
                )
                for doc in reader.docs():
                    stats.docs_read += 1
                    stats.input_bytes += doc.nbytes
                    pending[0] += 1
                    pending[1] += doc.nbytes
                    text, giant = doc.text, doc.giant
                    digest: int | None = 0
                    if giant is not None:  # measured in a first pass, never held as one str
                        try:
                            info = measure(giant)
                        except (BadText, Unsplittable) as exc:
                            reason = exc.reason if isinstance(exc, BadText) else OVERSIZED
                            self._bad(stats, reason, reader, doc.position, str(exc))
                            continue
                        n, digest = info.chars, info.digest
                    elif text is None:
                        self._bad(stats, str(doc.reason), reader, doc.position, doc.detail)
                        continue
                    else:
                        n = len(text)
                    if self.min_chars is not None and n < self.min_chars:
                        stats.filtered_short += 1
                        continue
                    if self.max_chars is not None and n > self.max_chars:
                        stats.filtered_long += 1
                        continue
                    if text is not None:
                        digest = stripped_hash(text) if need_hash else (0 if text.strip() else None)
                    if digest is None:
                        self._bad(stats, EMPTY, reader, doc.position, "no text after stripping")
                        continue
                    h = digest
                    if self.dedup and (h in seen or self.prior.get(h, index) < index):
                        stats.duplicates += 1  # an earlier copy is kept: this one would be dropped
                        continue
                    if giant is not None or encoder.is_long(text or ""):
                        flush()
                        try:
                            if giant is not None:
                                n_tokens = encoder.encode_pieces(pieces(giant.chunks()), write_tokens)
                            else:
                                n_tokens = encoder.encode_long(text or "", write_tokens)
                        except Unsplittable as exc:  # found before anything was written
                            self._bad(stats, OVERSIZED, reader, doc.position, str(exc))
                            continue
                        lengths.append(n_tokens)
                        stats.tokens += n_tokens
                    elif text is not None:
                        batch.append(text)
                        batch_chars += n
                    if self.dedup:
                        seen.add(h)
                    if need_hash:
                        lo = h & _LOW64
                        hashes_hi.append(h >> 64)
                        hashes_lo.append(lo)
                        if self.holdout > 0:
                            splits.append(holdout_flag(lo, self.holdout))
                    if meta_fh is not None:
                        meta_fh.write(
                            orjson.dumps(doc.meta, default=str, option=orjson.OPT_SORT_KEYS) + b"\n"
                        )
                    stats.docs_kept += 1
                    if batch_chars >= BATCH_CHARS:
                        flush()
            flush()
            progress(pending[0], 0, pending[1])
        _write_array(
            tmp / "lengths.i32", np.frombuffer(lengths, dtype=np.int32) if lengths else np.zeros(0, np.int32)
        )
        if need_hash:
            _write_hashes(tmp / "hashes.rec", hashes_hi, hashes_lo)
        if self.dedup:
            self._remember(seen, index)
        if self.holdout > 0:
            _write_array(
                tmp / "split.u8", np.frombuffer(splits, dtype=np.uint8) if splits else np.zeros(0, np.uint8)
            )
        return stats

    def _remember(self, kept: set[int], index: int) -> None:
        prior = self.prior
        if len(prior) >= MAX_PRIOR_HASHES:
            return
        for h in kept:
            if prior.setdefault(h, index) > index:
                prior[h] = index

    def _bad(self, stats: TaskStats, reason: str, reader: PieceReader, position: int, detail: str) -> None:
        if self.fail:
            raise InputError(
                f"{reader.where(position)}: {reason.replace('_', ' ')}: {detail}",
                hint="fix or drop that record, or rerun with --on-error skip (bad records are counted)",
            )
        stats.errors[reason] = stats.errors.get(reason, 0) + 1
        if len(stats.examples) < MAX_EXAMPLES:
            stats.examples.append({"reason": reason, "where": reader.where(position), "detail": detail[:200]})


def _maybe_open(path: Path, wanted: bool) -> Any:
    return open(path, "wb") if wanted else contextlib.nullcontext()


def _write_array(path: Path, arr: np.ndarray) -> None:
    with open(path, "wb") as fh:
        fh.write(np.ascontiguousarray(arr).data)


def _write_hashes(path: Path, hi: array[int], lo: array[int]) -> None:
    n = len(hi)
    rec = np.empty(n, dtype=HASH_DTYPE)
    if n:
        hi_arr = np.frombuffer(hi, dtype=np.uint64)
        lo_arr = np.frombuffer(lo, dtype=np.uint64)
        order = np.lexsort((lo_arr, hi_arr))
        rec["hi"], rec["lo"], rec["doc"] = hi_arr[order], lo_arr[order], order.astype(np.uint32)
    _write_array(path, rec)


def read_task_array(path: Path, dtype: Any) -> np.ndarray:
    if not path.is_file() or os.path.getsize(path) == 0:
        return np.zeros(0, dtype=dtype)
    return np.fromfile(path, dtype=dtype)


def run_task(plan: PrepPlan, index: int, work: WorkDir, site: SiteConfig | None = None) -> dict[str, Any]:
    """Run one task of a plan from scratch (what a Slurm array task calls); returns its summary."""
    return TaskRunner(plan, work, InputFS(site), encoder_for(plan)).run(index)


def encoder_for(plan: PrepPlan) -> Encoder:
    return Encoder(plan.tokenizer, special_as_text=plan.options.get("special_tokens") == "text")
