"""Layout spec validation, and `init` on empty and half-built tiers."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from storekit.errors import ConfigError, StorekitError
from storekit.layout.init import apply_init, plan_init
from storekit.layout.spec import load_layout, parse_layout
from storekit.store import Store

GOOD_AREA = '[layout]\nname = "t"\n[areas.data]\nmode = "0755"\n'


def test_bundled_layout_parses() -> None:
    spec = load_layout("llm-cluster")
    assert [a.name for a in spec.areas] == ["datasets", "checkpoints", "logs", "models", "scratch"]
    scratch = spec.area("scratch")
    assert scratch is not None and scratch.mode == 0o1777 and scratch.ttl_seconds == 14 * 86400
    ckpt = spec.area("checkpoints")
    assert ckpt is not None and ckpt.levels[0].matches("run_001") and len(ckpt.levels) == 1
    assert [w.name for w in ckpt.writers] == [
        "storekit", "torch-dcp", "megatron", "deepspeed", "nemo", "orbax", "hf-trainer"
    ]  # fmt: skip
    storekit = ckpt.writers[0]
    assert storekit.matches_unit("step_000100") and not storekit.matches_unit("step_100")
    assert spec.is_temp_name(".x.bin.storekit-tmp-abc") and spec.is_temp_name("step_1.partial")


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        ("[layout\nname=1", None, "invalid TOML"),
        (GOOD_AREA + "colour = 1\n", "areas.data.colour", "unknown key"),
        ('[layout]\nname = "t"\n[areas.data]\nmode = "755x"\n', "areas.data.mode", "octal mode"),
        ('[layout]\nname = "t"\n[areas.data]\nmode = 755\n', "areas.data.mode", "octal mode"),
        ('[layout]\nname = "t"\n[areas."../etc"]\nmode = "0755"\n', "areas.../etc", "one path component"),
        (GOOD_AREA + 'create = ["../../etc"]\n', "areas.data.create[0]", "single path component"),
        (GOOD_AREA + 'create = ["/abs"]\n', "areas.data.create[0]", "single path component"),
        (
            GOOD_AREA + 'levels = [{ name = "x", pattern = "([" }]\n',
            "areas.data.levels[0].pattern",
            "regular expression",
        ),
        (
            GOOD_AREA + 'levels = [{ name = "x", pattern = "a", committed_by = "../m" }]\n',
            "areas.data.levels[0].committed_by",
            "single path component",
        ),
        (GOOD_AREA + 'ttl = "soon"\n', "areas.data.ttl", "duration"),
        (GOOD_AREA + 'quota = "lots"\n', "areas.data.quota", "size"),
        (GOOD_AREA + "striping = { count = 0 }\n", "areas.data.striping.count", "positive integer"),
        ('[layout]\nname = "t"\n[areas]\n', "areas", "at least one area"),
        ('[areas.data]\nmode = "0755"\n', "layout", "expected a table"),
    ],
)
def test_bad_layout_names_file_key_and_expectation(text: str, key: str | None, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_layout(text.encode(), source="bad.toml")
    assert err.value.file == "bad.toml"
    assert err.value.key == key
    assert expected in str(err.value)
    assert str(err.value).startswith("bad.toml")


def test_non_utf8_layout() -> None:
    with pytest.raises(ConfigError, match="not UTF-8"):
        parse_layout(b"\xff\xfe[layout]", source="bad.toml")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_init_on_empty_tier_creates_everything_with_modes(local_store: Store) -> None:
    spec = load_layout("llm-cluster")
    os.rmdir(local_store.root)
    plan = plan_init(spec, local_store)
    assert plan.actions[0].action == "create-root"
    apply_init(plan, local_store)
    root = Path(local_store.root)
    assert sorted(p.name for p in root.iterdir()) == ["checkpoints", "datasets", "logs", "models", "scratch"]
    assert sorted(p.name for p in (root / "datasets").iterdir()) == ["code", "multimodal", "text"]
    assert _mode(root / "scratch") == 0o1777
    assert _mode(root / "checkpoints") == 0o2775
    assert _mode(root / "datasets") == 0o755
    assert _mode(root / "datasets/text") == 0o755
    assert plan_init(spec, local_store).actions == ()  # idempotent


def test_init_on_half_built_tier_fixes_modes_and_keeps_data(local_store: Store) -> None:
    spec = load_layout("llm-cluster")
    root = Path(local_store.root)
    (root / "checkpoints/run_001/step_000001").mkdir(parents=True)
    (root / "checkpoints/run_001/step_000001/w.bin").write_bytes(b"precious")
    (root / "scratch").mkdir()
    os.chmod(root / "scratch", 0o755)
    (root / "stray").mkdir()
    plan = plan_init(spec, local_store)
    kinds = {(a.action, a.path) for a in plan.actions}
    assert ("chmod", "scratch") in kinds
    assert ("mkdir", "datasets") in kinds and ("mkdir", "datasets/text") in kinds
    assert not any(a.path.startswith("checkpoints/") for a in plan.actions)
    apply_init(plan, local_store)
    assert _mode(root / "scratch") == 0o1777
    assert (root / "checkpoints/run_001/step_000001/w.bin").read_bytes() == b"precious"
    assert (root / "stray").is_dir()  # never deletes what it does not know
    assert plan_init(spec, local_store).actions == ()


def test_init_refuses_a_file_where_an_area_belongs(local_store: Store) -> None:
    (Path(local_store.root) / "logs").write_text("not a dir")
    with pytest.raises(StorekitError, match="logs exists and is not a directory"):
        plan_init(load_layout("llm-cluster"), local_store)


def test_init_refuses_a_non_empty_directory_that_is_not_a_storekit_tree(local_store: Store) -> None:
    """A shared 1777 dir with other users' files: init must not chmod it or add areas to it."""
    spec = load_layout("llm-cluster")
    root = Path(local_store.root)
    (root / "alice-notes.txt").write_text("mine")
    (root / "bob").mkdir()
    os.chmod(root, 0o1777)
    with pytest.raises(StorekitError, match=r"is not empty .* and holds no storekit layout") as err:
        plan_init(spec, local_store)
    assert "--adopt" in (err.value.hint or "")
    assert _mode(root) == 0o1777 and sorted(p.name for p in root.iterdir()) == ["alice-notes.txt", "bob"]
    plan = plan_init(spec, local_store, adopt=True)  # the explicit choice: laid out, nothing removed
    assert ("chmod", "") in {(a.action, a.path) for a in plan.actions}
    apply_init(plan, local_store)
    assert (root / "alice-notes.txt").read_text() == "mine" and (root / "bob").is_dir()
    assert plan_init(spec, local_store).actions == ()  # now a storekit tree: no flag needed again


def test_init_accepts_a_fresh_mount_and_a_half_built_tree(local_store: Store) -> None:
    spec = load_layout("llm-cluster")
    root = Path(local_store.root)
    (root / "lost+found").mkdir()  # what mkfs leaves in a new filesystem
    assert plan_init(spec, local_store).actions
    (root / "stray.txt").write_text("x")
    (root / "models").mkdir()  # one area is enough to say this is a storekit tree
    assert ("mkdir", "scratch") in {(a.action, a.path) for a in plan_init(spec, local_store).actions}
