"""Sizes, durations and the relative-path guard every store operation goes through."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storekit.errors import PathEscapeError
from storekit.paths import clean_rel, join_rel, resolves_outside
from storekit.units import format_bytes, parse_duration, parse_size, rate_unit


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512", 512),
        ("4KiB", 4096),
        ("16 MiB", 16 << 20),
        ("1GB", 10**9),
        ("1.5TiB", int(1.5 * 2**40)),
        ("2g", 2 * 2**30),  # K M G T P alone: powers of 1024, as coreutils and fio read them
        ("2G", 2 * 2**30),
        ("4k", 4096),
        ("3KB", 3000),
        ("1P", 2**50),
        ("1PB", 10**15),
        (7, 7),
    ],
)
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "lots", "4 XB", "-1", "1e3", -5])
def test_parse_size_rejects(bad: str | int) -> None:
    with pytest.raises(ValueError):
        parse_size(bad)


def test_parse_duration() -> None:
    assert parse_duration("90s") == 90
    assert parse_duration("15m") == 900
    assert parse_duration("14d") == 14 * 86400
    assert parse_duration("2w") == 14 * 86400
    assert parse_duration("12") == 12
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("soon")


def test_format_bytes() -> None:
    assert format_bytes(0) == "0 B"
    assert format_bytes(2048) == "2.0 KiB"
    assert format_bytes(3 * 2**40) == "3.0 TiB"


@pytest.mark.parametrize(
    ("rel", "expected"),
    [("", ""), ("a/b", "a/b"), ("./a//b/", "a/b"), ("datasets/text/çorba/数据", "datasets/text/çorba/数据")],
)
def test_clean_rel_normalises(rel: str, expected: str) -> None:
    assert clean_rel(rel) == expected


@pytest.mark.parametrize("bad", ["../x", "a/../../b", "a/..", "/etc/passwd", "a\\..\\b", "a\x00b"])
def test_clean_rel_refuses_escapes(bad: str) -> None:
    with pytest.raises(PathEscapeError):
        clean_rel(bad)


def test_join_rel() -> None:
    assert join_rel("datasets", "", "text/x") == "datasets/text/x"
    with pytest.raises(PathEscapeError):
        join_rel("datasets", "../../etc")


def test_a_symlink_out_of_the_root_is_found_and_one_inside_is_not(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "elsewhere"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    os.symlink(outside, root / "out")
    os.symlink(root / "sub", root / "in")
    os.symlink(root, root / "self")
    assert resolves_outside(str(root / "out" / "file"), str(root)) == str(outside / "file")
    assert resolves_outside(str(root / "in"), str(root)) is None
    assert resolves_outside(str(root / "self"), str(root)) is None  # the root itself is inside
    # a sibling whose name starts like the root is outside: prefixes are compared per component
    assert resolves_outside(str(tmp_path / "rootx"), str(root)) == str(tmp_path / "rootx")


def test_compact_sizes_and_rate_units() -> None:
    assert format_bytes(1 << 20, compact=True) == "1 MiB" and format_bytes(1536, compact=True) == "1.5 KiB"
    assert format_bytes(512, compact=True) == "512 B" and format_bytes(3 * 2**40, compact=True) == "3 TiB"
    assert rate_unit(2.5e9) == ("GB/s", 1e9) and rate_unit(999.0) == ("B/s", 1.0)
