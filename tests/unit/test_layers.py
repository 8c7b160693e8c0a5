"""Every module and package of storekit has a place in .importlinter's layers (ARCHITECTURE.md).

import-linter ignores a module that no layer names, so a new top-level module would be free to
import anything: this test makes placing it part of adding it. The contracts themselves are checked
by `lint-imports` in scripts/test.sh's lint step.
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _layered_names() -> set[str]:
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter")
    layers = config["importlinter:contract:layers"]["layers"]
    return set(re.findall(r"storekit\.([A-Za-z_][A-Za-z0-9_]*)", layers))


def _top_level_code() -> set[str]:
    package = REPO / "storekit"
    names = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    names |= {p.parent.name for p in package.glob("*/__init__.py")}
    return names


def test_every_top_level_module_is_in_a_layer() -> None:
    missing = sorted(_top_level_code() - _layered_names())
    assert not missing, f"add these to a layer in .importlinter (see ARCHITECTURE.md): {missing}"


def test_the_layers_name_no_module_that_is_gone() -> None:
    gone = sorted(_layered_names() - _top_level_code())
    assert not gone, f"remove these from .importlinter's layers: {gone}"
