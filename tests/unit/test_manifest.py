"""storekit.manifest: the one manifest module of datasets, checkpoints and tier units.

The fixtures in tests/fixtures/manifests were written by storekit before the manifest modules were
merged (tests/fixtures/manifests/record_manifests.py says how): each kind already on disk must keep
loading, verifying and recalling with today's code.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from storekit.checkpoint import commit
from storekit.config import TierConfig
from storekit.errors import InputError, MismatchError
from storekit.manifest import (
    MANIFEST_NAME,
    UNIT_MANIFEST_KIND,
    UNIT_MANIFEST_SUFFIX,
    manifest_digest,
    parse_manifest,
    parse_unit_manifest,
    read_manifest,
    verify_manifest,
)
from storekit.store import open_store
from storekit.tier.mover import recall_unit
from storekit.tier.stubfile import stub_path
from tests.conftest import REPO
from tests.unit.tier.helpers import make_unit, posix_site, snapshot

FIXTURES = REPO / "tests" / "fixtures" / "manifests"
UNIT = "checkpoints/run_001/step_100"  # the unit record_manifests.py drained


def test_importing_the_manifest_module_loads_no_store_and_no_fsspec() -> None:
    """A training script's `from storekit.checkpoint import commit` writes its manifest through
    storekit.manifest, which must stay light: no store package, no config, no fsspec."""
    code = (
        "import sys, storekit.checkpoint, storekit.manifest\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('fsspec', 's3fs', 'botocore')\n"
        "         or m.startswith(('storekit.store', 'storekit.ops', 'storekit.config'))]\n"
        "print(sorted(heavy), 'storekit.manifest' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[] True", out.stdout + out.stderr


def test_a_dataset_manifest_written_before_the_merge_loads_and_verifies(tmp_path: Path) -> None:
    data = (FIXTURES / "dataset-v1.manifest.json").read_bytes()
    doc = json.loads(data)
    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / MANIFEST_NAME).write_bytes(data)
    store = open_store(TierConfig(name="t", url=tmp_path.as_uri()))
    manifest = read_manifest(store, "v1")
    assert manifest.kind == "dataset" and manifest.storekit_version == doc["storekit_version"]
    assert [(f.path, f.size, f.xxh3_128) for f in manifest.files] == [
        (f["path"], f["size"], f["xxh3_128"]) for f in doc["files"]
    ]
    assert manifest.body == {
        k: v for k, v in doc.items() if k not in ("schema_version", "kind", "files", "storekit_version")
    }
    assert manifest.to_json() == data  # written again, the same bytes
    # the shards are not here: every file the manifest names is reported missing
    assert [(p.path, p.problem) for p in verify_manifest(store, "v1", manifest)] == [
        (f["path"], "missing") for f in doc["files"]
    ]


def test_a_checkpoint_commit_writes_the_bytes_it_wrote_before_the_merge(tmp_path: Path) -> None:
    """The commit API now builds its manifest with storekit.manifest: for the checkpoint the fixture
    recorded, the bytes are the old ones but for the time of the commit."""
    old = (FIXTURES / "checkpoint-v1.manifest.json").read_bytes()
    with commit(tmp_path / "run_001", step=1200) as stage:  # what record_manifests.py commits
        with stage.open("model/rank0.pt") as fh:
            fh.write(b"weights of rank 0\n" * 100)
        (stage.path / "config.json").write_text('{"lr": 0.0003}\n')
        stage.track("config.json")
    new = (tmp_path / "run_001" / "step_001200" / MANIFEST_NAME).read_bytes()
    created = json.loads(old)["created"]
    assert new.replace(json.loads(new)["created"].encode(), created.encode()) == old
    store = open_store(TierConfig(name="t", url=tmp_path.as_uri()))
    manifest = read_manifest(store, "run_001/step_001200")
    assert (manifest.kind, manifest.body["step"], len(manifest.files)) == ("checkpoint", 1200, 2)
    assert verify_manifest(store, "run_001/step_001200", manifest) == []
    assert parse_manifest(old, source="old").files == manifest.files


def test_a_tier_unit_archived_before_the_merge_parses_and_recalls(tmp_path: Path) -> None:
    data = (FIXTURES / f"tier-unit-v1{UNIT_MANIFEST_SUFFIX}").read_bytes()
    stub = (FIXTURES / "tier-unit-v1.storekit-stub").read_bytes()
    assert manifest_digest(data) == json.loads(stub)["manifest_xxh3"]
    unit = parse_unit_manifest(data, "fixture")
    assert unit.to_json() == data  # the shape stubs and journals hold the digest of is kept
    doc = json.loads(data)
    assert [e.manifest_dict() for e in unit.entries] == doc["entries"]
    assert (len(unit.files), unit.total_bytes) == (doc["files"], doc["bytes"])
    generic = parse_manifest(data, source="fixture")  # the one parser reads every kind
    assert generic.kind == UNIT_MANIFEST_KIND
    assert [(f.path, f.size, f.xxh3_128) for f in generic.files] == [
        (e.path, e.size, e.xxh3_128) for e in unit.files
    ]
    # the archive on disk as the old code left it: the copy, its manifest beside it, the stub
    burst, parallel = tmp_path / "burst", tmp_path / "parallel"
    make_unit(parallel / UNIT, seed=1)
    (parallel / f"{UNIT}{UNIT_MANIFEST_SUFFIX}").write_bytes(data)
    expected = snapshot(parallel / UNIT)
    stub_path(burst / UNIT).parent.mkdir(parents=True)
    stub_path(burst / UNIT).write_bytes(stub)
    result = recall_unit(burst, UNIT, journal_dir=tmp_path / "journal", site=posix_site(burst, parallel))
    assert (result.state, result.files, result.bytes) == ("done", doc["files"], doc["bytes"])
    assert snapshot(burst / UNIT) == expected and not stub_path(burst / UNIT).exists()


@pytest.mark.parametrize(
    ("fixture", "key", "error"),
    [
        ("checkpoint-v1.manifest.json", "schema_version", InputError),
        (f"tier-unit-v1{UNIT_MANIFEST_SUFFIX}", "version", MismatchError),
    ],
)
def test_one_schema_check_refuses_a_newer_version_in_one_line(
    tmp_path: Path, fixture: str, key: str, error: type[Exception]
) -> None:
    doc = json.loads((FIXTURES / fixture).read_bytes())
    doc[key] = 2
    kind = doc["kind"]
    with pytest.raises(error, match=rf"^x\.json: {key} 2 is not one this storekit reads \(1\)$"):
        if kind == UNIT_MANIFEST_KIND:
            parse_unit_manifest(json.dumps(doc).encode(), "x.json")
        else:
            parse_manifest(json.dumps(doc).encode(), source="x.json")


def test_a_unit_manifest_is_refused_where_another_kind_is_expected() -> None:
    data = (FIXTURES / "checkpoint-v1.manifest.json").read_bytes()
    with pytest.raises(MismatchError, match="kind 'checkpoint', expected 'storekit-archive-manifest'"):
        parse_unit_manifest(data, "x.json")
