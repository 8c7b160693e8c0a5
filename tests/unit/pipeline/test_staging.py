"""What an array element checks first: the tokenizer copy's xxh3, the sources' size and mtime."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storekit.errors import ExitCode, StorekitError
from storekit.pipeline.inputs import InputFS
from storekit.pipeline.plan import PrepPlan, plan_tasks
from storekit.pipeline.sources import discover_sources
from storekit.pipeline.spec import CLI_SOURCE, build_spec
from storekit.pipeline.staging import TOKENIZER_COPY, check_sources, copy_tokenizer, with_tokenizer_copy
from storekit.pipeline.tokenizer import load_tokenizer, read_tokenizer_json, resolve_tokenizer
from tests.unit.pipeline.helpers import TOKENIZER, sample_records, write_jsonl


def _plan(tmp_path: Path) -> PrepPlan:
    write_jsonl(tmp_path / "in" / "a.jsonl", sample_records(60_000))
    write_jsonl(tmp_path / "in" / "b.jsonl", sample_records(60_000, skip=200))
    spec = build_spec(
        CLI_SOURCE, {"name": "x", "inputs": (str(tmp_path / "in"),), "tokenizer": TOKENIZER}, {}
    )
    fs = InputFS(None)
    sources = discover_sources(spec.inputs, forced_format="auto", text_key="text", fs=fs)
    tok = resolve_tokenizer(TOKENIZER, eos=True, bos=False)
    return plan_tasks(spec, sources, tok)


def test_the_copy_is_the_planned_tokenizer_and_is_loaded_from_the_work_dir(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    copy = copy_tokenizer(plan, work)
    assert copy == work / TOKENIZER_COPY
    assert copy.read_text() == read_tokenizer_json(plan.tokenizer.file)  # stored uncompressed
    used = with_tokenizer_copy(plan, work)
    assert used.tokenizer.file == str(copy) and used.plan_id == plan.plan_id
    assert load_tokenizer(used.tokenizer).encode("def f(): pass").ids  # loads and encodes


def test_a_damaged_or_missing_copy_is_refused_with_exit_4(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(StorekitError) as info:
        with_tokenizer_copy(plan, work)
    assert info.value.exit_code == ExitCode.MISMATCH and "no tokenizer copy" in info.value.message
    copy = copy_tokenizer(plan, work)
    data = bytearray(copy.read_bytes())
    data[100] ^= 1
    copy.write_bytes(bytes(data))
    with pytest.raises(StorekitError) as info:
        with_tokenizer_copy(plan, work)
    assert info.value.exit_code == ExitCode.MISMATCH and "xxh3-128 differs" in info.value.message


def test_a_source_changed_since_planning_stops_the_task_naming_it(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    fs = InputFS(None)
    for task in range(len(plan.tasks)):
        check_sources(plan, task, fs)  # unchanged: passes
    a = tmp_path / "in" / "a.jsonl"
    st = a.stat()
    os.utime(a, (st.st_atime, st.st_mtime + 10))  # same size, touched
    task_of_a = next(
        t.index for t in plan.tasks if any(plan.sources[p.source].url == str(a) for p in t.pieces)
    )
    with pytest.raises(StorekitError) as info:
        check_sources(plan, task_of_a, fs)
    assert info.value.exit_code == ExitCode.ERROR and str(a) in info.value.message
    assert "mtime changed" in info.value.message
    a.write_bytes(a.read_bytes() + b"{}\n")
    with pytest.raises(StorekitError, match="size"):
        check_sources(plan, task_of_a, fs)
    a.unlink()
    with pytest.raises(StorekitError, match="gone"):
        check_sources(plan, task_of_a, fs)
