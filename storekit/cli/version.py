"""`storekit version`: what is installed, for bug reports and fleet inventories (`--json`)."""

from __future__ import annotations

import platform
import sys

import typer

from storekit import __version__
from storekit.cli.common import ConfigOpt, JsonOpt, QuietOpt, exit_codes, make_output


def register(app: typer.Typer) -> None:
    app.command("version", epilog=exit_codes())(version_command)


def version_command(json_out: JsonOpt = False, quiet: QuietOpt = False, config: ConfigOpt = None) -> None:
    """Print storekit's version (and, with --json, Python's and the platform's).

    \b
    Examples:
      storekit version
      storekit version --json | jq -r .version
    """
    out = make_output(json_out, quiet)  # --config is accepted as everywhere; no config is read
    doc = {
        "version": __version__,
        "python": platform.python_version(),
        "platform": sys.platform,
        "machine": platform.machine(),
    }
    out.result("version", doc, lambda c: c.print(f"storekit {__version__}", markup=False))
