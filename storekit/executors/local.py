"""Local executor: one worker process per core, each running whole tasks from the plan.

Processes, not threads: measured here, `tokenizers`' own thread pool scaled 1.7x on 2 cores and the
GIL serialises the id lists; one process per core with its own single-threaded tokenizer scales
linearly. Workers die with the parent (PR_SET_PDEATHSIG), so a SIGKILLed run leaves no orphans, and
a stopped run leaves only whole completion records behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import queue
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from storekit.config import SiteConfig
from storekit.errors import ExitCode, Interrupted, StorekitError
from storekit.pipeline import hooks
from storekit.pipeline.encode import Encoder
from storekit.pipeline.inputs import InputFS
from storekit.pipeline.plan import PrepPlan
from storekit.pipeline.task import TaskRunner, peak_rss
from storekit.pipeline.workdir import WorkDir

ProgressSink = Callable[[int, int, int], None]  # docs, tokens, input bytes
_PR_SET_PDEATHSIG = 1
_STOP_SIGNALS = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT", signal.SIGUSR1: "SIGUSR1"}


@dataclass
class RunReport:
    tasks_run: int = 0
    worker_peak_rss: list[int] = field(default_factory=list)
    seconds: float = 0.0


def default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))  # respects Slurm's and taskset's CPU masks
    except AttributeError:
        return os.cpu_count() or 1


def single_thread_env() -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["RAYON_NUM_THREADS"] = "1"


def run_tasks(
    plan: PrepPlan,
    work: WorkDir,
    site: SiteConfig | None,
    todo: Sequence[int],
    *,
    workers: int,
    progress: ProgressSink,
    on_done: Callable[[int, dict[str, Any]], None] | None = None,
) -> RunReport:
    """Run the tasks in `todo`; raises the first task's error, or Interrupted on a stop signal."""
    report = RunReport()
    started = time.monotonic()
    if not todo:
        return report
    workers = max(1, min(workers, len(todo)))
    # largest first (stable): a big task started last would leave the other cores idle at the end
    todo = sorted(todo, key=lambda i: -plan.tasks[i].est_bytes)
    try:
        if workers == 1:
            _run_inline(plan, work, site, todo, progress, report, on_done)
        else:
            _run_pool(plan, work, site, todo, workers, progress, report, on_done)
    except KeyboardInterrupt:
        work.remove_temps()
        raise _interrupted(report, len(todo)) from None
    except BaseException:
        work.remove_temps()  # tasks cut short by the failure: only whole completion records stay
        raise
    finally:
        report.seconds = time.monotonic() - started
    return report


def _interrupted(report: RunReport, total: int) -> Interrupted:
    return Interrupted(
        f"stopped by a signal after {report.tasks_run} of {total} remaining tasks; finished tasks are kept",
        hint="rerun the same command to resume",
    )


def _run_inline(
    plan: PrepPlan,
    work: WorkDir,
    site: SiteConfig | None,
    todo: Sequence[int],
    progress: ProgressSink,
    report: RunReport,
    on_done: Callable[[int, dict[str, Any]], None] | None,
) -> None:
    single_thread_env()  # --workers 1 means one core: no tokenizer thread pool either
    runner = TaskRunner(plan, work, InputFS(site), Encoder(plan.tokenizer), background_commit=True)

    def done(index: int, summary: dict[str, Any]) -> None:
        report.tasks_run += 1
        if on_done:
            on_done(index, summary)
        hooks.maybe_kill("STOREKIT_TEST_KILL_AFTER_TASKS", report.tasks_run)

    for index in todo:
        runner.run(index, progress, done)
    runner.drain()
    report.worker_peak_rss.append(peak_rss())


def _run_pool(
    plan: PrepPlan,
    work: WorkDir,
    site: SiteConfig | None,
    todo: Sequence[int],
    workers: int,
    progress: ProgressSink,
    report: RunReport,
    on_done: Callable[[int, dict[str, Any]], None] | None,
) -> None:
    single_thread_env()
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context("spawn")
    tasks: Any = ctx.Queue()
    results: Any = ctx.Queue()
    for index in todo:
        tasks.put(index)
    for _ in range(workers):
        tasks.put(None)
    procs = [
        ctx.Process(target=_worker_main, args=(str(work.path), site, tasks, results), daemon=True)
        for _ in range(workers)
    ]
    for p in procs:
        p.start()
    remaining = set(todo)
    try:
        while remaining:
            try:
                msg = results.get(timeout=0.5)
            except queue.Empty:
                _check_workers(procs, remaining)
                continue
            kind = msg[0]
            if kind == "progress":
                progress(msg[1], msg[2], msg[3])
            elif kind == "done":
                remaining.discard(msg[1])
                report.tasks_run += 1
                if on_done:
                    on_done(msg[1], msg[2])
                hooks.maybe_kill("STOREKIT_TEST_KILL_AFTER_TASKS", report.tasks_run)
            elif kind == "rss":
                report.worker_peak_rss.append(msg[1])
            elif kind == "error":
                raise _rebuild_error(msg)
            elif kind == "crash":
                raise StorekitError(
                    f"task {msg[1]} failed unexpectedly:\n{msg[2]}", hint="this is a bug; please report it"
                )
        deadline = time.monotonic() + 5
        while len(report.worker_peak_rss) < workers and time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):  # each worker sends its peak RSS as it leaves
                msg = results.get(timeout=0.2)
                if msg[0] == "rss":
                    report.worker_peak_rss.append(msg[1])
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        for p in procs:
            p.join(timeout=10)
        tasks.close()
        results.close()
        tasks.cancel_join_thread()
        results.cancel_join_thread()


def _check_workers(procs: Sequence[Any], remaining: set[int]) -> None:
    for p in procs:
        code = p.exitcode
        if code is None or code == 0:
            continue
        if -code in _STOP_SIGNALS:
            raise KeyboardInterrupt  # the same stop signal reached the workers first
        raise StorekitError(
            f"a worker process died ({'signal ' + str(-code) if code < 0 else 'exit code ' + str(code)}) "
            f"with {len(remaining)} tasks unfinished (out of memory?)",
            hint="rerun the same command to resume; finished tasks are kept",
        )
    if all(p.exitcode == 0 for p in procs):
        raise StorekitError(f"workers exited with {len(remaining)} tasks unfinished", hint="this is a bug")


def _rebuild_error(msg: tuple[Any, ...]) -> StorekitError:
    _, _index, _name, message, hint, code = msg
    exc = StorekitError(message, hint=hint)
    exc.exit_code = ExitCode(code)
    return exc


def _set_parent_death_signal() -> None:
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _worker_main(work_path: str, site: SiteConfig | None, tasks: Any, results: Any) -> None:
    _set_parent_death_signal()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; Ctrl-C reaches it too
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    single_thread_env()
    from pathlib import Path

    work = WorkDir(Path(work_path))
    plan = PrepPlan.from_json(work.plan_file.read_bytes())
    runner = TaskRunner(plan, work, InputFS(site), Encoder(plan.tokenizer), background_commit=True)

    def progress(docs: int, tokens: int, nbytes: int) -> None:
        results.put(("progress", docs, tokens, nbytes))

    def done(index: int, summary: dict[str, Any]) -> None:
        results.put(("done", index, summary))

    index = -1
    try:
        while (index := tasks.get()) is not None:
            runner.run(index, progress, done)
        runner.drain()
    except StorekitError as exc:
        results.put(("error", index, type(exc).__name__, exc.message, exc.hint, int(exc.exit_code)))
        return
    except Exception:
        results.put(("crash", index, traceback.format_exc(limit=8)))
        return
    results.put(("rss", peak_rss()))
