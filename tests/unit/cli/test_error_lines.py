"""Errors are one line `error: ...` (and maybe `hint: ...`): usage errors too, an unknown --tier is
named as typed (exit 3) everywhere, and a Slurm client's multi-line failure becomes its last line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from storekit.layout.clean import SlurmUnreachable, plan_clean
from storekit.layout.spec import load_layout
from storekit.store import open_store
from tests.conftest import Ran
from tests.unit.tier.conftest import make_site


@pytest.mark.parametrize(
    "args, message, hint",
    [
        (["status", "--bogus"], "No such option '--bogus'.", "hint: see storekit status --help"),
        (["bogus"], "No such command 'bogus'.", "hint: see storekit --help"),
        (["layout", "check", "--tier"], "Option '--tier' requires an argument.", None),
    ],
)
def test_usage_errors_are_one_line(
    tmp_path: Path, sk: Callable[..., Ran], args: list[str], message: str, hint: str | None
) -> None:
    ran = sk(tmp_path, *args)
    assert ran.code == 2 and ran.stdout == ""
    assert ran.stderr.splitlines() == [f"error: {message}"] + ([hint] if hint else [])


@pytest.mark.parametrize(
    "args", [["jobs", "status", "--tier", "nosuch"], ["tier", "--drain", "--tier", "nosuch"]]
)
def test_an_unknown_tier_is_named_as_typed(tmp_path: Path, sk: Callable[..., Ran], args: list[str]) -> None:
    make_site(tmp_path)
    ran = sk(tmp_path, *args)
    assert ran.code == 3 and ran.stdout == ""
    assert ran.stderr.splitlines() == [
        "error: no tier named 'nosuch' in storekit.toml",
        "hint: known tiers: lustre, nvme, vault",
    ]
    assert sk(tmp_path, *args, "--json").json()["error"]["exit_code"] == 3


def test_a_slurm_clients_lines_become_one(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    store = open_store(site.tiers["lustre"])
    squeue = (  # what squeue prints on a node whose config cannot be found (no controller)
        "squeue: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\n"
        "squeue: error: fetch_config: DNS SRV lookup failed\n"
        "squeue: error: _establish_config_source: failed to fetch config\n"
        "squeue: fatal: Could not establish a configuration source\n"
    )

    def down() -> set[str]:
        raise SlurmUnreachable(squeue)

    plan = plan_clean(load_layout("llm-cluster"), store, jobs=down)
    assert plan.slurm == "unreachable: squeue: fatal: Could not establish a configuration source"
