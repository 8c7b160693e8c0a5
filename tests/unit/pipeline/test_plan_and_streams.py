"""Pure parts: sizes, the task planner, the line splitter over byte ranges and compressed streams,
safe cuts for long documents."""

from __future__ import annotations

import gzip
import io
import itertools
import random
from dataclasses import replace
from pathlib import Path

import pytest
import zstandard

from storekit.pipeline import streams
from storekit.pipeline.cuts import Unsplittable, split_for_encoding
from storekit.pipeline.formats import FORMATS
from storekit.pipeline.formats.jsonl import MAX_COMPRESSED_SPLITS
from storekit.pipeline.plan import choose_task_bytes, plan_tasks
from storekit.pipeline.sources import SourceFile
from storekit.pipeline.spec import CLI_SOURCE, build_spec
from storekit.pipeline.streams import Decompressed, TruncatedInput, iter_lines
from storekit.pipeline.tokenizer import TokenizerInfo

TOK = TokenizerInfo(
    name="t",
    file="t.json",
    xxh3_128="0" * 32,
    vocab_size=65000,
    eos_id=0,
    bos_id=None,
    eos_token="<EOT>",
    bos_token=None,
    dtype="uint16",
    splittable=True,
)


def _spec(**kw: object):  # type: ignore[no-untyped-def]
    return build_spec(CLI_SOURCE, {"name": "x", "inputs": ("a",), "tokenizer": "t"}, kw)


def test_plan_splits_large_files_and_packs_small_ones() -> None:
    sources = [
        SourceFile(url="/big.jsonl", size=100 << 20, format="jsonl", data_size=100 << 20),
        *[SourceFile(url=f"/s{i}.txt", size=1000, format="text", data_size=1000) for i in range(50)],
        SourceFile(url="/c.jsonl.gz", size=10 << 20, format="jsonl", compression="gz", data_size=200 << 20),
        SourceFile(
            url="/p.parquet",
            size=9 << 20,
            format="parquet",
            data_size=12 << 20,
            chunks=((1000, 4 << 20), (1000, 4 << 20), (500, 4 << 20)),
        ),
    ]
    plan = plan_tasks(_spec(task_bytes="4MiB"), sources, TOK)
    big = [t for t in plan.tasks if t.pieces[0].source == 0]
    assert len(big) == 25  # a 100 MiB file is 25 tasks of 4 MiB
    assert big[0].pieces[0].start == 0 and big[-1].pieces[0].end is None
    assert all(a.pieces[0].end == b.pieces[0].start for a, b in itertools.pairwise(big))
    small = [t for t in plan.tasks if t.pieces[0].source in range(1, 51)]
    assert len(small) == 1 and len(small[0].pieces) == 50  # 50 small files share a task
    gz = [t for t in plan.tasks if t.pieces[0].source == 51]
    assert len(gz) == MAX_COMPRESSED_SPLITS  # bounded re-decompression
    pq = [p for t in plan.tasks for p in t.pieces if p.source == 52]
    assert [(p.start, p.end) for p in pq] == [(0, 1000), (1000, 2000), (2000, 2500)]


def test_plan_does_not_depend_on_workers_and_ids_change_with_options() -> None:
    sources = [SourceFile(url="/a.jsonl", size=10 << 20, format="jsonl", data_size=10 << 20)]
    a = plan_tasks(_spec(workers=1), sources, TOK)
    b = plan_tasks(_spec(workers=64), sources, TOK)
    assert a.to_json() == b.to_json()
    assert plan_tasks(_spec(holdout=0.1), sources, TOK).plan_id != a.plan_id
    bigger = [replace(sources[0], size=11 << 20, data_size=11 << 20)]
    assert plan_tasks(_spec(), bigger, TOK).plan_id != a.plan_id


def test_choose_task_bytes_bounds() -> None:
    assert choose_task_bytes(1 << 20) == 1 << 20
    assert choose_task_bytes(10 << 30) == 10 << 20
    assert choose_task_bytes(1 << 40) == 64 << 20


def _lines(data: bytes) -> list[tuple[int, bytes | None, int]]:
    out, off = [], 0
    parts = data.split(b"\n")
    if data.endswith(b"\n"):
        parts = parts[:-1]
    for line in parts:
        out.append((off, line if len(line) <= 3000 else None, len(line)))
        off += len(line) + 1
    return out


def _collect(stream: object, start: int, end: int | None) -> list[tuple[int, bytes | None, int]]:
    return [(o, None if v is None else bytes(v), n) for o, v, n in iter_lines(stream, start, end, 3000)]  # type: ignore[arg-type]


@pytest.mark.parametrize("compression", [None, "gz", "zst", "gz-multi"])
def test_byte_ranges_own_each_line_exactly_once(
    monkeypatch: pytest.MonkeyPatch, compression: str | None
) -> None:
    monkeypatch.setattr(streams, "BLOCK", 1024)
    rng = random.Random(3)
    lines = [
        bytes(rng.choice(b"abc{}") for _ in range(rng.choice([0, 1, 10, 500, 5000]))) for _ in range(400)
    ]
    data = b"\n".join(lines)
    if compression == "gz":
        blob = gzip.compress(data)
    elif compression == "gz-multi":
        blob = gzip.compress(data[:7000]) + gzip.compress(data[7000:])
    elif compression == "zst":
        blob = zstandard.ZstdCompressor().compress(data[:5000]) + zstandard.ZstdCompressor().compress(
            data[5000:]
        )
    else:
        blob = data

    def open_() -> object:
        raw = io.BytesIO(blob)
        return raw if compression is None else Decompressed(raw, compression.split("-")[0])

    want = _lines(data)
    for _ in range(30):
        cuts = sorted(rng.sample(range(1, len(data)), rng.randint(1, 6)))
        bounds = [0, *cuts, None]
        got = []
        for a, b in itertools.pairwise(bounds):
            got += _collect(open_(), a, b)  # type: ignore[arg-type]
        assert got == want


def test_truncated_stream_delivers_good_lines_then_raises() -> None:
    data = b"".join(b'{"text": "line %d"}\n' % i for i in range(20000))
    blob = gzip.compress(data)
    got = []
    with pytest.raises(TruncatedInput) as err:
        for _off, line, _n in iter_lines(
            Decompressed(io.BytesIO(blob[: len(blob) // 2]), "gz"), 0, None, 1000
        ):
            got.append(bytes(line))  # type: ignore[arg-type]
    assert got == data.split(b"\n")[: len(got)] and len(got) > 100
    assert err.value.offset >= sum(len(g) + 1 for g in got)


def test_split_for_encoding_cuts_only_at_safe_places() -> None:
    text = ("def f(x):\n    return x  # comment\n" * 4000) + "tail"
    pieces = split_for_encoding(text, piece=1000, window=4000)
    assert "".join(pieces) == text and len(pieces) > 50
    for left, right in itertools.pairwise(pieces):
        assert "!" <= left[-1] <= "~" and right[0] in " \t\r\n", (left[-5:], right[:5])
    with pytest.raises(Unsplittable):
        split_for_encoding("x" * 10_000, piece=1000, window=4000)


def test_pieces_encode_exactly_like_the_whole_document() -> None:
    """Cut every few hundred characters through real text and whitespace-heavy edge cases."""
    from tests.unit.pipeline.helpers import sample_records, tokenizer

    tok = tokenizer()
    rng = random.Random(5)
    real = "".join(r["text"] for r in sample_records(limit_bytes=300_000, max_doc=100_000))
    indented_json = "".join(f'[\n      "arn:aws:iam::{i}:policy/x",\n\t\t"b"]\r\n' for i in range(3000))
    words = [
        "word",
        "x",
        "'s",
        "42",
        "ünï",
        "\u00a0",
        "\u3000",
        "  ",
        "\t",
        "\n",
        "\r\n",
        "<EOT>",
        "e\u0301",
        "ﬁ",
        "¨",
        "...",
        "'",
        '"',
        "\u2028",
        "😀",
        "１２",
    ]
    noise = "".join(rng.choice(words) + rng.choice(["", " ", "\n", "  "]) for _ in range(60_000))
    for text in (real, indented_json, noise):
        pieces = split_for_encoding(text, piece=300, window=60_000)
        assert len(pieces) > 100
        whole = tok.encode(text, add_special_tokens=False).ids
        parts = [i for p in pieces for i in tok.encode(p, add_special_tokens=False).ids]
        assert parts == whole


def test_stripped_hash_of_long_text_equals_the_plain_one() -> None:
    import xxhash

    from storekit.pipeline.cuts import stripped_hash

    body = "\u00a0 \n" + ("naïve text 😀 " * 200_000) + " \t\n\u3000"
    assert len(body) > 1 << 20
    assert stripped_hash(body) == xxhash.xxh3_128_intdigest(body.strip().encode("utf-8"))
    assert stripped_hash(" \n\t" * 500_000) is None and stripped_hash(" ") is None


@pytest.mark.parametrize("bucket_entries", [3, 50, 4_000_000])
def test_cross_task_dedup_keeps_the_first_occurrence_in_plan_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bucket_entries: int
) -> None:
    """Any bucket size (memory bound) gives the drops a plain first-seen pass gives."""
    import numpy as np

    from storekit.pipeline import dedup
    from storekit.pipeline.taskparts import HASH_DTYPE

    monkeypatch.setattr(dedup, "BUCKET_ENTRIES", bucket_entries)
    rng = random.Random(11)
    pool = [(rng.getrandbits(64), rng.getrandbits(64)) for _ in range(40)]
    files, expected, seen = [], [], set()
    for task in range(7):
        hashes = rng.sample(pool, rng.randint(0, 15))  # unique within a task, as tasks guarantee
        drops = []
        for doc, h in enumerate(hashes):
            if h in seen:
                drops.append(doc)
            seen.add(h)
        expected.append(drops)
        rec = np.zeros(len(hashes), dtype=HASH_DTYPE)
        if hashes:
            rec["hi"], rec["lo"] = zip(*hashes, strict=True)
            rec["doc"] = np.arange(len(hashes))
            rec = rec[np.lexsort((rec["lo"], rec["hi"]))]
        path = tmp_path / f"h{task}.rec"
        path.write_bytes(rec.tobytes())
        files.append(path)
    index = dedup.find_cross_task_duplicates(files, tmp_path / "dedup")
    assert [index.for_task(t).tolist() for t in range(7)] == expected
    assert index.count == sum(len(d) for d in expected)


def test_a_changed_file_is_restated_only_where_its_pieces_are_byte_ranges() -> None:
    # `jobs rerun` follows a fixed input by its new size alone only for uncompressed jsonl and text
    src = SourceFile(url="/in/a.jsonl", size=100, format="jsonl", data_size=100, mtime=1.0)
    again = FORMATS["jsonl"].restated(src, 150, 2.0)
    assert again == replace(src, size=150, data_size=150, mtime=2.0)
    assert FORMATS["text"].restated(replace(src, format="text"), 150, 2.0) is not None
    assert FORMATS["jsonl"].restated(replace(src, compression="gz"), 150, 2.0) is None
    for rows in ("parquet", "arrow"):
        assert FORMATS[rows].restated(replace(src, format=rows), 150, 2.0) is None
