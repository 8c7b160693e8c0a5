"""The write stage of a task: the parts its kept documents go into (see task.py for the list).

`TaskParts` is filled document by document while the task reads; `finish()` writes the per-document
arrays once the last document is in. Finalize reads them back with `read_task_array`.
"""

from __future__ import annotations

import os
from array import array
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import numpy as np
import orjson

HASH_DTYPE = np.dtype([("hi", "<u8"), ("lo", "<u8"), ("doc", "<u4")])
_LOW64 = (1 << 64) - 1


def holdout_flag(lo: int, fraction: float) -> int:
    """Deterministic: the low 32 bits of the document hash, as a fraction, below the holdout share."""
    return 1 if (lo & 0xFFFFFFFF) < fraction * 4294967296.0 else 0


class TaskParts:
    """tokens.bin and meta.jsonl as documents arrive; lengths, sorted hashes and split flags at the end."""

    def __init__(self, tmp: Path, *, hashes: bool, holdout: float, keep_fields: bool) -> None:
        self.tmp = tmp
        self.hashes = hashes
        self.holdout = holdout
        self.lengths = array("i")
        self._hi, self._lo = array("Q"), array("Q")
        self._splits = array("B")
        self._tokens: BinaryIO = open(tmp / "tokens.bin", "wb")  # noqa: SIM115 (closed by __exit__)
        self._meta: BinaryIO | None = open(tmp / "meta.jsonl", "wb") if keep_fields else None  # noqa: SIM115

    def __enter__(self) -> TaskParts:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._tokens.close()
        if self._meta is not None:
            self._meta.close()

    def write_tokens(self, ids: np.ndarray) -> None:
        self._tokens.write(ids.data)

    def split(self, digest: int) -> int:
        """The split stage: 1 when the document is held out (always 0 without a holdout fraction)."""
        return holdout_flag(digest & _LOW64, self.holdout) if self.holdout > 0 else 0

    def keep(self, digest: int, held_out: int, meta: dict[str, Any] | None) -> None:
        """Record one kept document (its tokens and length are already written)."""
        if self.hashes:
            self._hi.append(digest >> 64)
            self._lo.append(digest & _LOW64)
            if self.holdout > 0:
                self._splits.append(held_out)
        if self._meta is not None:
            self._meta.write(orjson.dumps(meta, default=str, option=orjson.OPT_SORT_KEYS) + b"\n")

    def finish(self) -> None:
        """Write the per-document arrays (after the last document, before the completion record)."""
        _write_array(self.tmp / "lengths.i32", np.frombuffer(self.lengths, dtype=np.int32))
        if self.hashes:
            _write_hashes(self.tmp / "hashes.rec", self._hi, self._lo)
        if self.holdout > 0:
            _write_array(self.tmp / "split.u8", np.frombuffer(self._splits, dtype=np.uint8))


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
