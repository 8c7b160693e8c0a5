"""CLI for `storekit init`, `storekit layout check` and `storekit status` (being built)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    return None
