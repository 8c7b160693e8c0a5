"""Leaving the process without tearing the interpreter down, once nothing is left to lose.

After `prepare dataset` has committed its dataset, freeing the tokenizer, the compiled ranks and
tiktoken's core (and every module) at interpreter exit takes ~0.1 s of wall time: a tenth of the
serial time a run has left. A command whose output is durable and that leaves no thread with work
calls `skip_teardown()`; the entry point (`storekit`, `python -m storekit`) then runs the atexit
handlers, flushes stdout and stderr, and ends with os._exit. Callers of the CLI in-process (tests)
are unaffected: only the entry point looks at the flag.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from typing import NoReturn

_skip = False


def skip_teardown() -> None:
    global _skip
    _skip = True


def teardown_skipped() -> bool:
    return _skip


def exit_now(code: int) -> NoReturn:
    """atexit handlers, then stdio flushed, then the process ends with `code`."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing left to say to it
            stream.flush()
    os._exit(code)
