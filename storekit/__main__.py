"""`storekit` and `python -m storekit`: stop signals are caught before the CLI loads.

Loading the CLI takes a few hundred milliseconds (a Slurm array element skips it:
storekit/slurm/element_entry.py); a SIGTERM or SIGUSR1 (Slurm preemption) in that
window must stop the command like any other stop (exit 130), not kill it by the default action.
"""

from __future__ import annotations

import json
import os
import signal
import sys

# storekit never calls BLAS, but importing numpy starts OpenBLAS's thread pool, one thread per CPU
# the process may use, and each new thread spins a while: ~0.07 CPU-s per process on 2 CPUs, more on
# a big node, paid by every Slurm element on the CPUs its tasks need. Set before numpy is imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from storekit.exits import exit_now, teardown_skipped
from storekit.interrupts import interrupt_on  # signal only: loads in no time


def main() -> None:
    interrupt_on(signal.SIGTERM, signal.SIGUSR1)
    try:
        early = os.environ.get("STOREKIT_TEST_SIGNAL_AT_START")  # fault point for the tests
        if early in ("SIGTERM", "SIGUSR1"):
            os.kill(os.getpid(), getattr(signal, early))
        if sys.argv[1:3] == ["jobs", "run-element"]:  # every Slurm element: skip loading the CLI
            from storekit.slurm.element_entry import fast_args, run

            if (parsed := fast_args(sys.argv[3:])) is not None:
                raise SystemExit(run(*parsed))
        from storekit.cli.app import main as cli_main

        cli_main()  # catches its own stops once it runs; this covers the steps before
    except SystemExit as exc:
        if isinstance(exc.code, int | None) and teardown_skipped():
            exit_now(exc.code or 0)
        raise
    except KeyboardInterrupt:
        message = "interrupted; rerun the same command to resume"
        if "--json" in sys.argv[1:]:
            doc = {"schema_version": 1, "error": {"message": message, "hint": None, "exit_code": 130}}
            sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        sys.stderr.write(f"error: {message}\n")
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
