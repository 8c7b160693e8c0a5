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

import json
import re
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any

from storekit import faults
from storekit.config import SiteConfig
from storekit.errors import InputError
from storekit.executors.base import Stopped
from storekit.executors.local import peak_rss
from storekit.jobdir import DONE, io_errors, part_digest, remove_path
from storekit.pipeline.cuts import WHITE_SPACE, Unsplittable, stripped_hash
from storekit.pipeline.encode import Encoder
from storekit.pipeline.giant import BadText, GiantInfo, measure
from storekit.pipeline.inputs import InputFS
from storekit.pipeline.plan import PrepPlan
from storekit.pipeline.readers import EMPTY, OVERSIZED, Doc, PieceReader
from storekit.pipeline.taskparts import TaskParts
from storekit.pipeline.workdir import WorkDir

# a character other than whitespace, a control or a format character (Cc, Cf): a text without one is
# encoded first, to see if the tokenizer leaves anything of it
_VISIBLE = re.compile(r"[^\s\x00-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u180e\u200b-\u200f"
                      r"\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]")  # fmt: skip
BATCH_CHARS = 256 * 1024  # text per encode call: small batches keep the tokenizer's memory low
MAX_EXAMPLES = 5
MAX_PRIOR_HASHES = 1_000_000  # ~100 MB: a cache that only saves work, never changes the result
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


class _EncodeStage:
    """Encode stage: short documents are batched (one tokenizer call per BATCH_CHARS), long and giant
    ones encoded piece by piece straight into the parts; progress is reported per batch."""

    def __init__(
        self,
        encoder: Encoder,
        parts: TaskParts,
        stats: TaskStats,
        progress: ProgressFn,
        should_stop: Callable[[], bool] | None,
    ) -> None:
        self.encoder = encoder
        self.parts = parts
        self.stats = stats
        self.progress = progress
        self.should_stop = should_stop
        self.batch: list[str] = []
        self.batch_chars = 0
        self.pending_docs = self.pending_bytes = 0  # read but not yet reported
        # kept documents (index in the task) the fast engine left to `tokenizers`: finalize counts
        # those the dataset keeps, a number that does not depend on which worker ran which task
        self.hf_docs: list[int] = []
        self.special_docs: list[tuple[int, int]] = []  # (kept document, special-token strings in it)

    def read(self, nbytes: int) -> None:
        self.stats.docs_read += 1
        self.stats.input_bytes += nbytes
        self.pending_docs += 1
        self.pending_bytes += nbytes

    def add(self, doc: Doc, chars: int) -> None:
        """Encode one kept document (raises Unsplittable, before writing anything, for one that can't)."""
        text, giant = doc.text, doc.giant
        if giant is not None or self.encoder.is_long(text or ""):
            self.flush()
            if giant is not None:
                n_tokens = self.encoder.encode_giant(giant, self.parts.write_tokens)
            else:
                n_tokens = self.encoder.encode_long(text or "", self.parts.write_tokens)
            self._note(len(self.parts.lengths))
            self.parts.lengths.append(n_tokens)
            self.stats.tokens += n_tokens
        elif text is not None:
            self.batch.append(text)
            self.batch_chars += chars
            if self.batch_chars >= BATCH_CHARS:
                self.flush()

    def flush(self) -> None:
        if self.should_stop is not None and self.should_stop():
            raise Stopped
        if self.batch:
            tokens, lens = self.encoder.encode_batch(self.batch)
            self._note(len(self.parts.lengths))
            self.parts.write_tokens(tokens)
            self.parts.lengths.extend(lens)
            self.stats.tokens += len(tokens)
            self.progress(self.pending_docs, len(tokens), self.pending_bytes)
            self.pending_docs = self.pending_bytes = 0
            self.batch, self.batch_chars = [], 0

    def _note(self, first: int) -> None:
        """Per-document facts of the last encode call, by kept-document index (`first`: its first)."""
        self.hf_docs += [first + k for k in self.encoder.last_hf]
        self.special_docs += [(first + k, n) for k, n in self.encoder.last_specials]

    def report(self) -> None:
        self.progress(self.pending_docs, 0, self.pending_bytes)


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
        self.need_hash = self.dedup or self.holdout > 0
        self.min_chars = opts["min_chars"]
        self.max_chars = opts["max_chars"]
        self.fail = opts["on_error"] == "fail"
        self.keep = tuple(opts["keep_fields"])
        # hash -> earliest task (plan order) that kept it, from tasks this process already ran: a copy
        # in a later task is dropped at finalize anyway, so it need not be tokenized at all
        self.prior: dict[int, int] = {}
        self.hf_docs: list[int] = []  # the last task's (see _EncodeStage.hf_docs)
        self.special_docs: list[tuple[int, int]] = []  # the last task's (_EncodeStage.special_docs)

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
                    "engine_hf_docs": self.hf_docs,  # their indices among the task's kept documents
                    # [kept document, literal special-token strings in it]: finalize sums the kept ones
                    "special_token_docs": [list(d) for d in self.special_docs],
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
        # one look per future: one finishing between two looks would lose its error
        finished = {f: f.done() for f in self._pending}
        self._pending = [f for f, done in finished.items() if not done]
        for future, done in finished.items():
            if done:
                future.result()  # re-raises a failed commit here, in the caller's thread

    def drain(self) -> None:
        """Wait for every background commit, then raise the first failure: after a failure the
        next commits may still be renaming, and the caller removes temp dirs once this returns."""
        pending, self._pending = self._pending, []
        wait(pending)
        for future in pending:
            future.result()

    def _run(self, index: int, tmp: Path, progress: ProgressFn) -> TaskStats:
        """The fused loop: each document passes validate, length filter, hash, dedup, encode, split
        and write (the methods below, `_EncodeStage`, `TaskParts`) in one pass; a stage that refuses
        a document counts it and the next document starts."""
        stats = TaskStats()
        self.hf_docs, self.special_docs = [], []
        seen: set[int] = set()  # hashes kept by this task
        opts = self.plan.options
        parts = TaskParts(tmp, hashes=self.need_hash, holdout=self.holdout, keep_fields=bool(self.keep))
        with parts:
            encoding = _EncodeStage(self.encoder, parts, stats, progress, self.should_stop)
            for piece in self.plan.tasks[index].pieces:
                reader = PieceReader(
                    self.fs,
                    self.plan.sources[piece.source],
                    piece,
                    text_key=opts["text_key"],
                    keep_fields=self.keep,
                    max_doc_bytes=opts["max_doc_bytes"],
                )
                for doc in reader.docs():
                    encoding.read(doc.nbytes)
                    measured = self._validate(doc, reader, stats)
                    if measured is None or not self._length_ok(measured.chars, stats):
                        continue
                    if not self._encodable(doc, measured, reader, stats):
                        continue
                    digest = self._digest(doc, measured.digest, reader, stats)
                    if digest is None or self._duplicate(digest, index, seen, stats):
                        continue
                    try:
                        encoding.add(doc, measured.chars)
                    except Unsplittable as exc:  # found before anything was written
                        self._bad(stats, OVERSIZED, reader, doc.position, str(exc))
                        continue
                    parts.keep(digest, parts.split(digest), doc.meta)
                    if self.dedup:
                        seen.add(digest)
                    stats.docs_kept += 1
            encoding.flush()
            encoding.report()
            self.hf_docs, self.special_docs = encoding.hf_docs, encoding.special_docs
        parts.finish()
        if self.dedup:
            self._remember(seen, index)
        return stats

    def _validate(self, doc: Doc, reader: PieceReader, stats: TaskStats) -> GiantInfo | None:
        """Validate stage: characters (and a giant document's hash and cut proof), or None for an
        unusable record.

        A giant document is measured in a first pass (never held as one str); its hash comes with it.
        """
        if doc.giant is not None:
            try:
                return measure(doc.giant, self.encoder.cut)
            except BadText as exc:
                self._bad(stats, exc.reason, reader, doc.position, str(exc))
                return None
        if doc.text is None:
            self._bad(stats, str(doc.reason), reader, doc.position, doc.detail)
            return None
        return GiantInfo(chars=len(doc.text), digest=None)

    def _encodable(self, doc: Doc, measured: GiantInfo, reader: PieceReader, stats: TaskStats) -> bool:
        """A document must be cut by its rule, or be short enough to encode whole, into pieces within
        the bound (after the length filter: --max-chars is one way out the refusal names)."""
        try:
            if measured.uncuttable is not None:
                raise Unsplittable(measured.uncuttable)
            self.encoder.check_whole(measured.chars)
        except Unsplittable as exc:
            self._bad(stats, OVERSIZED, reader, doc.position, str(exc))
            return False
        return True

    def _length_ok(self, chars: int, stats: TaskStats) -> bool:
        """Length filter stage (--min-chars / --max-chars)."""
        if self.min_chars is not None and chars < self.min_chars:
            stats.filtered_short += 1
            return False
        if self.max_chars is not None and chars > self.max_chars:
            stats.filtered_long += 1
            return False
        return True

    def _digest(self, doc: Doc, giant: int | None, reader: PieceReader, stats: TaskStats) -> int | None:
        """The stripped text's xxh3-128 (0 when neither dedup nor holdout needs it); None: empty text."""
        text = doc.text
        if text is None:
            digest = giant
        elif self.need_hash:
            digest = stripped_hash(text)
        else:
            digest = 0 if text.strip(WHITE_SPACE) else None
        if digest is None:
            self._bad(stats, EMPTY, reader, doc.position, "no text after stripping")
        elif text is not None and _VISIBLE.search(text) is None and self.encoder.encodes_nothing(text):
            # control and format characters only (U+001C..U+001F, U+200B, ...) that this tokenizer
            # drops (BERT's normalizer does): no document, as for one of whitespace only
            self._bad(stats, EMPTY, reader, doc.position, "the tokenizer encodes it to no tokens")
            return None
        return digest

    def _duplicate(self, digest: int, index: int, seen: set[int], stats: TaskStats) -> bool:
        """Dedup stage: a copy this task or an earlier task (plan order) kept makes this one a duplicate."""
        if self.dedup and (digest in seen or self.prior.get(digest, index) < index):
            stats.duplicates += 1  # an earlier copy is kept: this one would be dropped at finalize
            return True
        return False

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


def run_task(plan: PrepPlan, index: int, work: WorkDir, site: SiteConfig | None = None) -> dict[str, Any]:
    """Run one task of a plan from scratch (what a Slurm array task calls); returns its summary."""
    return TaskRunner(plan, work, InputFS(site), encoder_for(plan)).run(index)


def encoder_for(plan: PrepPlan) -> Encoder:
    return Encoder(plan.tokenizer, special_as_text=plan.options.get("special_tokens") == "text")
