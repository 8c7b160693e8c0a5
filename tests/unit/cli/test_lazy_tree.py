"""A run builds only the noun it invokes; help, typos and completion still see every command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from storekit.cli.app import NOUNS, _modules_for
from tests.conftest import REPO, storekit_env

# prints the storekit.cli modules a `main(ARGS)` run imported, whatever it exits with
PROBE = """
import json, sys
from storekit.cli.app import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.startswith("storekit.cli."))), file=sys.stderr)
"""


def imported_cli_modules(*args: str) -> tuple[set[str], str]:
    ran = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=REPO,
        env=storekit_env({"COLUMNS": "80"}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    modules = json.loads(ran.stderr.strip().splitlines()[-1])
    nouns = {m.rsplit(".", 1)[1] for m in modules} & set(NOUNS.values())
    return nouns, ran.stdout


def test_a_prepare_run_imports_no_other_noun() -> None:
    nouns, out = imported_cli_modules("prepare", "dataset", "--help")
    assert nouns == {"prepare"}
    assert "--tokenizer-engine" in out


def test_layout_verbs_at_the_root_build_the_layout_noun() -> None:
    nouns, out = imported_cli_modules("init", "--help")
    assert nouns == {"layout"}
    assert "Usage: storekit init" in out


@pytest.mark.parametrize("args", [("--help",), ("prepar",), ("--help", "prepare")])
def test_help_and_typos_see_every_command(args: tuple[str, ...]) -> None:
    nouns, out = imported_cli_modules(*args)
    assert nouns == set(NOUNS.values())
    if args == ("--help",):
        for word in NOUNS:
            assert f"  {word} " in out or f"  {word}\n" in out, word


def test_which_module_a_command_line_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("_STOREKIT_COMPLETE", raising=False)
    assert _modules_for(["prepare", "dataset", "-i", "x.jsonl"]) == ("prepare",)
    assert _modules_for(["--version"]) is None
    assert _modules_for(["-h", "tier"]) is None
    assert _modules_for(["status", "--json"]) == ("layout",)
    assert _modules_for(["nosuch"]) is None
    monkeypatch.setenv("_STOREKIT_COMPLETE", "complete_bash")
    assert _modules_for(["prepare"]) is None
