"""Stubs: the one reader, and `layout check` / `ckpt list` understanding what a moved unit leaves."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from storekit.layout.check import check_layout
from storekit.layout.spec import load_layout
from storekit.store import open_store
from storekit.stubs import StubError, parse_stub, render_stub, stub_rel, unit_rel_of
from storekit.tier.stubfile import read_stub, stub_path
from tests.conftest import Ran
from tests.unit.tier.conftest import dcp_unit, make_site
from tests.unit.tier.helpers import ARCHIVED


def test_a_stub_round_trips_and_holds_no_url() -> None:
    data = render_stub(ARCHIVED)
    assert parse_stub(data, "s") == ARCHIVED
    assert b"://" not in data
    assert stub_rel("checkpoints/run_001/step_5/") == "checkpoints/run_001/step_5.storekit-stub"
    assert unit_rel_of("checkpoints/run_001/step_5.storekit-stub") == "checkpoints/run_001/step_5"


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"kind": "other"}, "s: kind: expected 'storekit-stub'"),
        ({"schema_version": 2}, "s: schema_version: 2 is not 1"),
        ({"to_tier": None}, "s: to_tier: unexpected value None"),
        ({"manifest_xxh3": "abc"}, "s: manifest_xxh3: expected 32 lowercase hex digits"),
        ({"to_path": "s3://bucket/x"}, "s: to_path: 's3://bucket/x' is not a path relative to the tier root"),
        ({"to_path": "../x"}, "s: to_path: '../x' is not a path relative"),
        ({"action": "copy"}, "s: action: expected one of archive, drain"),
        ({"surprise": 1}, "s: surprise: unknown key"),
        ({"bytes": True}, "s: bytes: unexpected value True"),
        ({"dirs": -1}, "s: dirs: negative"),
        ({"unit_id": "x"}, "s: unit_id: expected 16 lowercase hex digits"),
    ],
)
def test_a_bad_stub_is_one_line_naming_the_key(change: dict[str, object], words: str) -> None:
    doc = json.loads(render_stub(ARCHIVED))
    doc.update(change)
    with pytest.raises(StubError) as err:
        parse_stub(json.dumps(doc).encode(), "s")
    assert str(err.value).startswith(words) and "\n" not in str(err.value)
    assert err.value.exit_code == 4
    with pytest.raises(StubError, match=r"^s: not a storekit stub"):
        parse_stub(b"\xff", "s")


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_a_stub_that_is_not_a_regular_file_is_refused_not_read(tmp_path: Path, kind: str) -> None:
    """A FIFO under a stub's name beside someone's unit blocked `tier` opening it (forever: nobody
    writes it); a link would make another place's stub this unit's. storekit writes neither."""
    path = stub_path(tmp_path / "step_5")
    if kind == "fifo":
        os.mkfifo(path)
    else:
        elsewhere = tmp_path / "elsewhere.storekit-stub"
        elsewhere.write_bytes(render_stub(ARCHIVED))
        path.symlink_to(elsewhere)
    what = "a FIFO" if kind == "fifo" else "a symbolic link"
    with pytest.raises(StubError, match=rf"not a storekit stub \(not a regular file \({what}\)"):
        read_stub(path)


def test_layout_check_knows_stubs_of_checkpoints_and_datasets(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    store = open_store(site.tier("lustre"))
    spec = load_layout("llm-cluster")
    run = tmp_path / "lustre/checkpoints/run_001"
    dcp_unit(run, "step_000100")
    (run / "step_000050.storekit-stub").write_bytes(render_stub(ARCHIVED))
    versions = tmp_path / "lustre/datasets/text/web"
    versions.mkdir(parents=True)
    ds = replace(ARCHIVED, unit="v1", unit_kind="dataset", writer=None, step=None, to_path="datasets/x/v1")
    (versions / "v1.storekit-stub").write_bytes(render_stub(ds))
    (tmp_path / "lustre/.storekit-tier-journal").mkdir()  # the mover's journals: storekit's own
    (run / "step_000100.storekit-archive.json").write_text("{}")  # a drained unit's manifest beside it
    later = time.time() + 86400
    assert check_layout(spec, store, now=later).findings == []

    (run / "step_000060.storekit-stub").write_bytes(b"{}")
    (versions / "v2.storekit-stub").write_bytes(b"not json")
    dcp_unit(run, "step_000050")  # back, but the stub is still there
    found = sorted((f.rule, f.path) for f in check_layout(spec, store, now=later).findings)
    assert found == [
        ("bad-stub", "checkpoints/run_001/step_000060.storekit-stub"),
        ("bad-stub", "datasets/text/web/v2.storekit-stub"),
        ("stub-beside-unit", "checkpoints/run_001/step_000050.storekit-stub"),
    ]


def test_ckpt_list_shows_archived_checkpoints(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    make_site(tmp_path)
    run = tmp_path / "lustre/checkpoints/run_001"
    dcp_unit(run, "step_000100")
    (run / "step_000050.storekit-stub").write_bytes(render_stub(ARCHIVED))
    ran = sk(tmp_path, "ckpt", "list", "run_001", "--json")
    assert ran.code == 0, ran.stderr
    doc = ran.json()
    assert [u["name"] for u in doc["units"]] == ["step_000100"]  # type: ignore[attr-defined]
    archived = doc["archived"]
    assert isinstance(archived, list) and len(archived) == 1
    assert archived[0]["path"] == "checkpoints/run_001/step_000050" and archived[0]["to_tier"] == "vault"
    assert archived[0]["state"] == "archived" and doc["problems"] == []
    human = sk(tmp_path, "ckpt", "list", "run_001")
    assert "step_000050" in human.stdout
    assert "archived to vault:checkpoints/run_001/step_000050" in human.stdout
