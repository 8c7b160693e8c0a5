"""storekit.readers: one rule per kind of value, the same wherever it is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from storekit.bench.spec import TargetSpec, build_spec
from storekit.errors import ConfigError, UsageError
from storekit.layout.spec import parse_layout
from storekit.pipeline.spec import build_spec as build_pipeline
from storekit.policies import parse_policies
from storekit.readers import (
    Invalid,
    read_bool,
    read_choice,
    read_duration,
    read_fraction,
    read_int,
    read_int_list,
    read_number,
    read_percent,
    read_size,
    read_size_list,
    read_str_list,
)


@pytest.mark.parametrize(
    ("read", "value", "expected"),
    [
        (read_size, "2G", 2 << 30),
        (read_size, "2GB", 2_000_000_000),
        (read_size, 4096, 4096),
        (read_duration, "14d", 14 * 86400.0),
        (read_duration, 90, 90.0),
        (lambda v: read_int(v, low=1, high=8), "8", 8),
        (read_fraction, 0, 0.0),
        (read_percent, " 85% ", 0.85),
        (lambda v: read_choice(v, ("a", "b")), "b", "b"),
        (lambda v: read_str_list(v, split_commas=True), "a, b,,c", ("a", "b", "c")),
        (read_int_list, "4,1,4,2", (1, 2, 4)),
        (read_size_list, "1M,4k", (4096, 1 << 20)),
        (read_bool, False, False),
    ],
)
def test_a_good_value_reads_as_its_type(read: Any, value: Any, expected: Any) -> None:
    assert read(value) == expected


@pytest.mark.parametrize(
    ("read", "value", "words"),
    [
        (read_size, True, "expected a size"),
        (read_size, "-1M", "cannot be negative"),
        (lambda v: read_size(v, low=1), 0, "greater than zero"),
        (read_size, "2 lots", "is not a size"),
        (read_duration, "soon", "is not a duration"),
        (read_duration, -5, "is negative"),
        (lambda v: read_int(v, low=0), -1, "a whole number ≥ 0, got -1"),
        (lambda v: read_int(v, low=1, high=8), 9, "from 1 to 8"),
        (read_int, 2.5, "a whole number, got 2.5"),
        (read_int, True, "got True"),  # TOML's true is not 1
        (read_int, "x", "'x' is not a whole number"),
        (lambda v: read_number(v, low=1, high=4), 5, "5 is out of range; expected 1 to 4"),
        (read_fraction, 1.0, "fraction in [0, 1)"),
        (read_percent, "85", "a percentage"),
        (read_percent, "100%", "between 0% and 100%"),
        (lambda v: read_choice(v, ("a", "b")), "c", "expected one of a, b, got 'c'"),
        (read_bool, "yes", "expected true or false"),
        (read_int_list, "", "comma-separated list"),
    ],
)
def test_a_bad_value_says_what_was_expected(read: Any, value: Any, words: str) -> None:
    with pytest.raises(Invalid) as info:
        read(value)
    assert words in str(info.value)


def test_one_size_and_duration_grammar_across_options_pipelines_policies_and_layouts(tmp_path: Path) -> None:
    """`2G` and `14d` read the same in a bench option, a pipeline file, a tier policy and a layout;
    and a bad one gets the reader's words with the place it came from (option, or file and key)."""
    bench = build_spec(
        TargetSpec(kind="posix", root=str(tmp_path)), pattern="shards", size="2G", file_size="1G", workers="1"
    )
    pipeline = build_pipeline(
        "p.toml", {"inputs": ["x"], "tokenizer": "t", "name": "n"}, {"shard_bytes": "2G"}
    )
    policy = parse_policies({"p": {"action": "archive", "larger_than": "2G", "older_than": "14d"}}, "s.toml")[
        "p"
    ]
    layout_text = b'[layout]\nname = "l"\n[areas.scratch]\nquota = "2G"\nttl = "14d"\n'
    (area,) = parse_layout(layout_text, source="l.toml").areas
    assert bench.size == pipeline.shard_bytes == policy.larger_than == area.quota_bytes == 2 << 30
    assert policy.older_than_s == area.ttl_seconds == 14 * 86400
    with pytest.raises(UsageError, match=r"^--size: '2 lots' is not a size"):
        build_spec(TargetSpec(kind="posix", root=str(tmp_path)), pattern="shards", size="2 lots")
    with pytest.raises(ConfigError) as info:
        build_pipeline(
            "p.toml", {"inputs": ["x"], "tokenizer": "t", "name": "n", "shard_bytes": "2 lots"}, {}
        )
    assert str(info.value).startswith("p.toml: output.shard_size: '2 lots' is not a size")
    with pytest.raises(ConfigError) as info:
        parse_policies({"p": {"action": "archive", "larger_than": "2 lots"}}, "s.toml")
    assert "policies.p.larger_than" in str(info.value) and "is not a size" in str(info.value)
