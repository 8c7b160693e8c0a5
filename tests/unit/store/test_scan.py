"""The streaming tree scanner: the compiled listing and os.scandir's give the same entries, in walk
order, with the values lstat gives; it is lazy; it copes with directories removed while it scans."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from storekit.errors import NotFoundError, StorekitError
from storekit.store import scan as scanmod
from storekit.store.scan import ScanEntry, python_listing, scan_tree
from tests.conftest import IN_CI


@pytest.fixture(params=["native", "python"])
def listing_kind(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    # one build per test process, not per test: these tests are about the walk (building: below)
    monkeypatch.setenv("STOREKIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "scan-cache"))
    monkeypatch.setenv("STOREKIT_SCAN_NATIVE", "1" if request.param == "native" else "0")
    scanmod.load.cache_clear()
    if request.param == "native" and scanmod.load()[0] is None:
        why = scanmod.load()[1]
        pytest.fail(f"the scanner must build in CI: {why}") if IN_CI else pytest.skip(why)
    yield str(request.param)
    scanmod.load.cache_clear()


def expected(top: Path, prefix: str = "") -> list[ScanEntry]:
    """An independent reference: recursion over sorted os.listdir with os.lstat."""
    out: list[ScanEntry] = []
    for name in sorted(os.listdir(os.fsencode(top))):
        path = os.path.join(os.fsencode(top), name)
        st = os.lstat(path)
        rel = prefix + os.fsdecode(name)
        out.append(ScanEntry(rel, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode))
        if stat.S_ISDIR(st.st_mode):
            out.extend(expected(Path(os.fsdecode(path)), rel + "/"))
    return out


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    top = tmp_path / "top"
    for rel, data in {
        "run_001/step_10/model.bin": b"m" * 1000,
        "run_001/step_10/.done": b"",
        "run_001/step_9/model.bin": b"old",
        "run_001/latest": b"10",
        "run_001-x/a": b"a",  # "-" sorts before "_": run_001-x comes before run_001
        "Zebra/upper-first": b"Z",  # bytes order: uppercase before lowercase
        "çorba/数据.bin": "ü".encode(),
    }.items():
        path = top / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (top / "empty").mkdir()
    (top / "run_001" / "link-to-dir").symlink_to(top / "run_001" / "step_10")  # never followed
    (top / "dangling").symlink_to(top / "nowhere")
    os.mkdir(os.fsencode(top) + b"/bad-\xff-name")  # not UTF-8: comes back surrogate-escaped
    with open(os.fsencode(top) + b"/bad-\xff-name/f", "wb") as fh:
        fh.write(b"f")
    os.utime(top / "run_001" / "latest", ns=(1_000_000_000_123_456_789, 1_700_000_000_987_654_321))
    return top


def test_entries_match_lstat_in_walk_order(tree: Path, listing_kind: str) -> None:
    got = list(scan_tree(str(tree)))
    assert got == expected(tree)
    by_rel = {e.rel: e for e in got}
    latest = by_rel["run_001/latest"]
    assert latest.mtime_ns == 1_700_000_000_987_654_321 and latest.size == 2 and not latest.is_dir
    assert by_rel["run_001/link-to-dir"].is_link and not by_rel["run_001/link-to-dir"].is_dir
    assert "run_001/link-to-dir/model.bin" not in by_rel
    assert by_rel["empty"].is_dir and by_rel["bad-\udcff-name/f"].size == 1
    assert by_rel["çorba/数据.bin"].size == 2
    rels = [e.rel for e in got]
    # a directory comes before its contents, and a subtree's entries are contiguous
    assert rels.index("run_001") < rels.index("run_001/step_10") < rels.index("run_001/step_10/.done")
    inside = [i for i, r in enumerate(rels) if r.startswith("run_001/")]
    assert inside == list(range(inside[0], inside[-1] + 1))
    assert rels.index("Zebra") < rels.index("bad-\udcff-name") < rels.index("run_001")


def test_prefix_and_subdirectory(tree: Path, listing_kind: str) -> None:
    got = list(scan_tree(str(tree / "run_001"), "runs/run_001/"))
    assert got == expected(tree / "run_001", "runs/run_001/")
    assert got[0].rel == "runs/run_001/latest"


@pytest.mark.parametrize(("batch", "threaded"), [(1, False), (3, True), (4096, True)])
def test_the_walker_agrees_with_scandir_at_any_batch_size(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int, threaded: bool
) -> None:
    monkeypatch.setenv("STOREKIT_CACHE_DIR", str(tmp_path / "cache"))
    scanmod.load.cache_clear()
    native, why = scanmod.load()
    if native is None:
        pytest.fail(why) if IN_CI else pytest.skip(why)
    monkeypatch.setattr(scanmod.NativeScan, "batch", batch)
    monkeypatch.setattr(scanmod.NativeScan, "threaded", threaded)
    for sub in ("", "run_001", "run_001/step_10", "empty"):
        want = list(scanmod._preorder(str(tree / sub), "p/", python_listing(str(tree / sub), "p/")))
        assert list(native.walk(str(tree / sub), "p/")) == want
    scanmod.load.cache_clear()


def test_a_walk_left_early_stops_its_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STOREKIT_CACHE_DIR", str(tmp_path / "cache"))
    scanmod.load.cache_clear()
    native, why = scanmod.load()
    if native is None:
        pytest.fail(why) if IN_CI else pytest.skip(why)
    monkeypatch.setattr(scanmod.NativeScan, "batch", 16)
    for d in range(20):
        (tmp_path / "t" / f"d{d:02d}").mkdir(parents=True)
        for f in range(50):
            (tmp_path / "t" / f"d{d:02d}" / f"f{f:02d}").touch()
    it = scan_tree(str(tmp_path / "t"))
    assert [next(it).rel for _ in range(3)] == ["d00", "d00/f00", "d00/f01"]
    assert native.lib.sk_walk_live() == 1  # waiting with its read-ahead
    it.close()
    assert native.lib.sk_walk_live() == 0  # stopped and joined
    assert sum(1 for _ in scan_tree(str(tmp_path / "t"))) == 20 * 51
    assert native.lib.sk_walk_live() == 0
    scanmod.load.cache_clear()


@pytest.mark.parametrize(
    "names_bytes",
    [0, pytest.param(scanmod.NAMES_BYTES, marks=pytest.mark.slow)],  # the full-size batch is slow
)
def test_a_big_directory_spans_batches(
    tmp_path: Path, listing_kind: str, names_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scanmod, "NAMES_BYTES", names_bytes)  # 0: each batch ends when ~4 KiB of names fill
    top = tmp_path / "big"
    top.mkdir()
    names = [f"{i:05d}-" + "n" * 150 for i in range(5000)]  # > 4,096 entries and > 64 bytes per name
    for name in names:
        (top / name).touch()
    got = list(scan_tree(str(top)))
    assert [e.rel for e in got] == names and got == expected(top)


def test_it_is_lazy_and_a_directory_removed_meanwhile_is_left_out(
    tmp_path: Path, listing_kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scanmod.NativeScan, "batch", 1)  # the walker lists nothing before it is asked
    monkeypatch.setattr(scanmod.NativeScan, "threaded", False)
    top = tmp_path / "t"
    for rel in ("a/1", "b/2", "c/3"):
        (top / rel).parent.mkdir(parents=True)
        (top / rel).touch()
    it = scan_tree(str(top))
    assert next(it).rel == "a"  # only the top and nothing below b or c has been listed yet
    (top / "b" / "2").unlink()
    (top / "b").rmdir()
    (top / "c" / "4").touch()
    rest = [e.rel for e in it]
    assert rest == ["a/1", "b", "c", "c/3", "c/4"]  # b was listed with the top; its contents went


def test_missing_root_is_not_found_and_a_file_is_refused(tmp_path: Path, listing_kind: str) -> None:
    with pytest.raises(NotFoundError) as info:
        list(scan_tree(str(tmp_path / "nope")))
    assert info.value.exit_code == 3 and "nope" in str(info.value)
    (tmp_path / "f").touch()
    with pytest.raises(StorekitError, match="f"):
        list(scan_tree(str(tmp_path / "f")))


def test_why_not_native(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STOREKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("STOREKIT_SCAN_NATIVE", "0")
    scanmod.load.cache_clear()
    assert scanmod.load() == (None, "STOREKIT_SCAN_NATIVE=0")
    monkeypatch.setenv("STOREKIT_SCAN_NATIVE", "1")
    monkeypatch.setenv("CC", "false")
    scanmod.load.cache_clear()
    native, why = scanmod.load()
    assert native is None and why == "false could not compile scan_dir.c: exit 1"
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").touch()
    assert [e.rel for e in scan_tree(str(tmp_path / "d"))] == ["x"]  # scans all the same
    scanmod.load.cache_clear()
