"""What `prepare dataset` creates passes `storekit layout check`: a bare version number becomes v<N>,
a name the layout would call misnamed is refused before anything is written, and a scratch/ it is the
first to need gets the layout's mode (1777), not the umask's."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

from tests.conftest import Ran
from tests.unit.pipeline.helpers import TOKENIZER


def corpus(tmp_path: Path, name: str = "in.jsonl") -> Path:
    src = tmp_path / name
    src.write_text("".join(json.dumps({"text": f"document {i} of a few words"}) + "\n" for i in range(5)))
    return src


def prepare(sk: Callable[..., Ran], cwd: Path, *args: str) -> Ran:
    return sk(cwd, "prepare", "dataset", "--tokenizer", TOKENIZER, "--workers", "1", "-q", *args)


def test_without_init_what_prepare_writes_passes_layout_check(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    os.umask(0o022)
    src = corpus(tmp_path)
    ran = prepare(sk, tmp_path, "-i", str(src), "--name", "web", "--version", "2", "--json")
    assert ran.code == 0, ran.stderr
    assert ran.json()["path"] == "datasets/text/web/v2"
    assert (tmp_path / "storage/datasets/text/web/v2/manifest.json").is_file()
    assert stat.S_IMODE((tmp_path / "storage/scratch").stat().st_mode) == 0o1777
    assert sk(tmp_path, "init", "-q").code == 0  # the other areas; it must have nothing to fix
    check = sk(tmp_path, "layout", "check", "--json")
    assert check.code == 0, check.stdout
    assert check.json()["clean"] is True


def test_a_name_the_layout_rejects_is_refused_before_writing(tmp_path: Path, sk: Callable[..., Ran]) -> None:
    src = corpus(tmp_path)
    ran = prepare(sk, tmp_path, "-i", str(src), "--name", "WebCorpus")
    assert ran.code == 2 and not (tmp_path / "storage").exists()
    assert ran.stderr.splitlines()[0] == (
        "error: <command line>: --name: 'WebCorpus' would fail `storekit layout check` (misnamed); "
        "expected lowercase letters, digits, '.', '_' and '-', starting with a letter or digit"
    )
    ran = prepare(sk, tmp_path, "-i", str(src), "--name", "web", "--version", "final")
    assert ran.code == 2 and "--version: 'final' would fail `storekit layout check`" in ran.stderr
    # a name taken from the input file is lowercased instead
    ran = prepare(sk, tmp_path, "-i", str(corpus(tmp_path, "MyCorpus.jsonl")), "--json")
    assert ran.code == 0 and ran.json()["path"] == "datasets/text/mycorpus/v1"


def test_under_a_group_writable_umask_what_prepare_writes_passes_layout_check(
    tmp_path: Path, sk: Callable[..., Ran]
) -> None:
    """umask 002 (users' default on many clusters, with a private group each) must not make a
    dataset group-writable in datasets/, which the layout keeps read-only for everyone but its owner."""
    src = corpus(tmp_path)
    saved = os.umask(0o002)
    try:
        assert sk(tmp_path, "init", "-q").code == 0
        ran = prepare(sk, tmp_path, "-i", str(src), "--name", "web")
        assert ran.code == 0, ran.stderr
        bare = tmp_path / "bare"  # no init: prepare makes datasets/ and everything below it
        bare.mkdir()
        ran = prepare(sk, bare, "-i", str(src), "--name", "web")
        assert ran.code == 0, ran.stderr
        check = sk(tmp_path, "layout", "check", "--json")
    finally:
        os.umask(saved)
    assert check.code == 0, check.stdout
    for root in (tmp_path, bare):
        dataset = root / "storage/datasets/text/web/v1"
        made = [dataset.parent, dataset, *dataset.iterdir()]
        assert [p.name for p in made if p.stat().st_mode & 0o022] == [], root
        assert stat.S_IMODE(dataset.stat().st_mode) == 0o755
    assert stat.S_IMODE((bare / "storage/datasets").stat().st_mode) == 0o755  # the layout's mode
    assert stat.S_IMODE((bare / "storage/datasets/text").stat().st_mode) == 0o755
