"""CLI for `storekit bench` (being built; see the open issue)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    return None
