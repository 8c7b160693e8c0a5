"""Compiled fast-BPE tokenizers kept per tokenizer file in the user's private cache.

Compiling is a Python pass over the vocabulary and merges plus, without `ignore_merges`, the
whole-token check (seconds with `tokenizers`); loading an entry takes ~10 ms. An entry is keyed by
the tokenizer.json's xxh3-128 and by the digest of the compiler's own source, so a changed compiler
never reads an old entry. It carries the xxh3 of its payload: a damaged entry is compiled again,
never trusted. Entries are written atomically into a directory only this user can write to; one
that cannot be written only costs the compile next time.

The entry also holds the added tokens as `tokenizers` loaded them (ids, flags), with that library's
version: a process that finds the entry needs no `tokenizers.Tokenizer` at all (loading one is ~0.1 s
for a 65k vocabulary, paid by every Slurm element). Another `tokenizers` version reads no entry.

Layout: one JSON header line, then the ranks dict in `marshal`'s format (~7 ms to read 65k ranks, a
third of rebuilding them from arrays), which may change between Pythons: the header names the Python
that wrote it (cache tag) and another reads no entry. The payload's xxh3 is checked before `marshal`
reads it, and the result must be a dict of bytes to int of the header's count.
"""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import stat
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import xxhash

from storekit.durable import write_file_atomic
from storekit.pipeline.fastbpe import AddedToken, Compiled, compile_fast

FORMAT = 2


_ADDED_FIELDS = ("content", "id", "special", "single_word", "lstrip", "rstrip", "normalized")


@cache
def tokenizers_version() -> str:
    """The `tokenizers` that read the added tokens: another version may read a file differently.

    Read from its dist-info beside the package where there is exactly one: importing it only for
    its version costs a process that never loads a tokenizer (a Slurm element) ~15 ms."""
    import importlib.util

    spec = importlib.util.find_spec("tokenizers")
    if spec is not None and spec.origin:
        site = os.path.dirname(os.path.dirname(spec.origin))
        with contextlib.suppress(OSError):
            found = [n for n in os.listdir(site) if n.startswith("tokenizers-") and n.endswith(".dist-info")]
            if len(found) == 1:
                return found[0][len("tokenizers-") : -len(".dist-info")]
    import tokenizers

    return str(tokenizers.__version__)


@cache
def compiler_digest() -> str:
    """The compiler's identity: a change to fastbpe.py (or this format) makes a new cache key."""
    from storekit.pipeline import fastbpe

    source = Path(fastbpe.__file__).read_bytes()
    return xxhash.xxh3_64_hexdigest(source + f"format {FORMAT}".encode())


def cache_root() -> Path:
    from storekit.cbuild import cache_dir

    return cache_dir() / "fastbpe"


def entry_path(key: str) -> Path:
    return cache_root() / f"compiled-{compiler_digest()}-{key}.bin"


def _private(directory: Path) -> bool:
    """Ours and writable by nobody else: an entry decides token ids, so nobody else may plant one."""
    try:
        st = directory.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def load(key: str) -> Compiled | None:
    """The cached compile of the tokenizer file with xxh3 `key`, or None (missing, damaged, not private)."""
    path = entry_path(key)
    if not _private(path.parent):
        return None
    try:
        data = path.read_bytes()
        head, _, payload = data.partition(b"\n")
        meta = json.loads(head)
        if meta.get("format") != FORMAT or xxhash.xxh3_128_hexdigest(payload) != meta.get("payload_xxh3"):
            return None
        if meta.get("tokenizers") != tokenizers_version():
            return None
        added = tuple(
            AddedToken(str(t[0]), int(t[1]), *(bool(x) for x in t[2:]))
            for t in meta["added"]
            if len(t) == len(_ADDED_FIELDS)
        )
        if len(added) != len(meta["added"]):
            return None
        if meta.get("python") != sys.implementation.cache_tag:
            return None
        ranks = marshal.loads(payload)
        if not _is_ranks(ranks, int(meta["count"])):
            return None
        return Compiled(
            pattern=str(meta["pattern"]),
            pattern_name=str(meta["pattern_name"]),
            normalizers=tuple(str(n) for n in meta["normalizers"]),
            ignore_merges=bool(meta["ignore_merges"]),
            ranks=ranks,
            added=added,
        )
    except (OSError, ValueError, KeyError, TypeError, EOFError):
        return None


def _is_ranks(ranks: object, count: int) -> bool:
    return (
        isinstance(ranks, dict)
        and len(ranks) == count
        and set(map(type, ranks)) <= {bytes}
        and set(map(type, ranks.values())) <= {int}
    )


def store(key: str, entry: Compiled) -> None:
    """Best effort: write the entry atomically; any failure leaves the cache as it was."""
    payload = marshal.dumps(entry.ranks)
    meta = {
        "format": FORMAT,
        "pattern": entry.pattern,
        "pattern_name": entry.pattern_name,
        "normalizers": list(entry.normalizers),
        "ignore_merges": entry.ignore_merges,
        "added": [[getattr(t, f) for f in _ADDED_FIELDS] for t in entry.added],
        "tokenizers": tokenizers_version(),
        "python": sys.implementation.cache_tag,
        "count": len(entry.ranks),
        "payload_xxh3": xxhash.xxh3_128_hexdigest(payload),
    }
    root = cache_root()
    with contextlib.suppress(OSError):
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        if _private(root):
            write_file_atomic(entry_path(key), json.dumps(meta).encode() + b"\n" + payload, mode=0o600)


def compile_cached(key: str, read_doc: Callable[[], dict[str, Any]], load_hf: Callable[[], Any]) -> Compiled:
    """compile_fast for the tokenizer file whose xxh3-128 is `key`, from the user's cache when an
    entry of this compiler is there; a fresh compile is stored for the next run. `load_hf` (the
    loaded `tokenizers.Tokenizer`) is called only for a fresh compile."""
    cached = load(key)
    if cached is not None:
        return cached
    compiled = compile_fast(read_doc(), load_hf(), proof_key=key)
    store(key, compiled)
    return compiled
