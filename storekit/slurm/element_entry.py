"""`storekit jobs run-element WORKDIR [--config FILE]`, as the sbatch script runs it, without the CLI.

Every array element starts a Python process, so its start-up is paid once per element and node.
Typer, Click and Rich are about a third of it (~0.09 s of ~0.27 s here, and hundreds of file opens
of the install, each a metadata request on a shared file system) and an element needs none of
them: one path, an optional config, one line printed. `storekit/__main__.py` sends exactly that
argument shape here; anything else (--help, --json, -q) goes through the full CLI, which runs the
same `run_element` and prints the same line.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def fast_args(args: Sequence[str]) -> tuple[str, str | None] | None:
    """(work dir, config) when `args` (after `jobs run-element`) are only those, else None."""
    rest = list(args)
    config = None
    for i, arg in enumerate(rest):
        if arg == "--config" and i + 1 < len(rest):
            config = rest[i + 1]
            del rest[i : i + 2]
            break
        if arg.startswith("--config="):
            config = arg.split("=", 1)[1]
            del rest[i]
            break
    if len(rest) != 1 or rest[0].startswith("-") or (config is not None and config.startswith("-")):
        return None
    return rest[0], config


def run(work_dir: str, config: str | None) -> int:
    """What the CLI's `jobs run-element` does for these arguments: the exit code."""
    import gc

    # start-up (imports, plan) makes objects and no garbage: collecting meanwhile is wasted CPU on a
    # node's cores; run_element freezes what start-up made and collects again before its tasks
    gc.disable()
    from pathlib import Path

    from storekit.config import load_config, redact_urls, refuse_url_credentials
    from storekit.errors import StorekitError
    from storekit.slurm.run import run_element

    try:
        for arg in (work_dir, config or ""):
            if "://" in arg:
                refuse_url_credentials(arg, "command line")
        result = run_element(Path(work_dir), load_config(config))
    except StorekitError as exc:
        sys.stderr.write(f"error: {redact_urls(exc.message)}\n")
        if exc.hint:
            sys.stderr.write(f"hint: {redact_urls(exc.hint)}\n")
        return int(exc.exit_code)
    print(result.summary(), flush=True)
    return 0
