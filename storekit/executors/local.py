"""Local executor: worker threads sharing one tokenizer, in as many processes as it takes.

`tokenizers` releases the GIL while it encodes, so a few threads of one process run on as many
cores; measured here, two threads sharing one tokenizer spend ~10% less CPU per token than two forked
processes with a copy each (and the Python side, ~4% of a task, is what the GIL serialises). Past
THREADS_PER_PROCESS threads, more processes: the GIL then never becomes the limit. A single process
runs its threads in the caller; several are forked and die with the parent (PR_SET_PDEATHSIG), so a
SIGKILLed run leaves no orphans, and a stopped run leaves only whole completion records behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from storekit import faults
from storekit.config import SiteConfig
from storekit.errors import ExitCode, Interrupted, StorekitError
from storekit.pipeline.inputs import InputFS
from storekit.pipeline.plan import PrepPlan
from storekit.pipeline.task import Stopped, TaskRunner, encoder_for, peak_rss
from storekit.pipeline.workdir import WorkDir

ProgressSink = Callable[[int, int, int], None]  # docs, tokens, input bytes
_PR_SET_PDEATHSIG = 1
THREADS_PER_PROCESS = 2  # the measured gain is for 2; more would make the GIL the limit sooner
_STOP_SIGNALS = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT", signal.SIGUSR1: "SIGUSR1"}


@dataclass
class RunReport:
    tasks_run: int = 0
    worker_peak_rss: list[int] = field(default_factory=list)  # of forked worker processes only
    seconds: float = 0.0

    def task_done(
        self, index: int, summary: dict[str, Any], on_done: Callable[[int, dict[str, Any]], None] | None
    ) -> None:
        """A completion record exists (one call at a time: under the threads' lock or from the pool loop)."""
        self.tasks_run += 1
        if on_done:
            on_done(index, summary)
        faults.point("prepare.task-done")


def default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))  # respects Slurm's and taskset's CPU masks
    except AttributeError:
        return os.cpu_count() or 1


def single_thread_env() -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["RAYON_NUM_THREADS"] = "1"


def split_workers(workers: int) -> list[int]:
    """Threads per process for `workers` cores: as few processes as THREADS_PER_PROCESS allows."""
    processes = -(-workers // THREADS_PER_PROCESS)
    return [workers // processes + (i < workers % processes) for i in range(processes)]


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
    threads = split_workers(workers)
    try:
        if len(threads) == 1:
            _run_here(plan, work, site, todo, threads[0], progress, report, on_done)
        else:
            _run_pool(plan, work, site, todo, threads, progress, report, on_done)
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


def run_tasks_on_threads(
    plan: PrepPlan,
    work: WorkDir,
    site: SiteConfig | None,
    next_task: Callable[[], int | None],
    threads: int,
    progress: ProgressSink,
    done: Callable[[int, dict[str, Any]], None],
) -> None:
    """Run tasks from `next_task()` until it returns None, on `threads` threads of this process.

    The first failure stops the other threads (between two batches) and is raised here; so is
    KeyboardInterrupt, once every thread has stopped and removed its unfinished task.
    """
    single_thread_env()  # each thread encodes in itself: no tokenizer thread pool on top
    stop = threading.Event()
    failures: list[BaseException] = []
    lock = threading.Lock()

    def locked_progress(docs: int, tokens: int, nbytes: int) -> None:
        with lock:
            progress(docs, tokens, nbytes)

    def locked_done(index: int, summary: dict[str, Any]) -> None:
        with lock:
            done(index, summary)

    def loop() -> None:
        fs, encoder = InputFS(site), encoder_for(plan)
        runner = TaskRunner(plan, work, fs, encoder, background_commit=True, should_stop=stop.is_set)
        index: int | None = -1
        try:
            while not stop.is_set() and (index := next_task()) is not None:
                runner.run(index, locked_progress, locked_done)
            runner.drain()
        except Stopped:
            with contextlib.suppress(Exception):
                runner.drain()
        except BaseException as exc:
            with contextlib.suppress(Exception):
                exc.task_index = index  # type: ignore[attr-defined]  # for the worker's report
            failures.append(exc)
            stop.set()

    if threads == 1:
        loop()
    else:
        pool = [threading.Thread(target=loop, name=f"storekit-task-{i}") for i in range(threads)]
        for t in pool:
            t.start()
        try:
            for t in pool:
                while t.is_alive():
                    t.join(0.2)  # wakes up for signals (a bare join() would not)
        except BaseException:
            stop.set()
            for t in pool:
                t.join()
            raise
    if failures:
        raise failures[0]


def _run_here(
    plan: PrepPlan,
    work: WorkDir,
    site: SiteConfig | None,
    todo: Sequence[int],
    threads: int,
    progress: ProgressSink,
    report: RunReport,
    on_done: Callable[[int, dict[str, Any]], None] | None,
) -> None:
    pending = iter(todo)
    take = threading.Lock()

    def next_task() -> int | None:
        with take:
            return next(pending, None)

    def done(index: int, summary: dict[str, Any]) -> None:
        report.task_done(index, summary, on_done)

    run_tasks_on_threads(
        plan, work, site, next_task, threads, progress, done
    )  # this process: the caller counts it


def _run_pool(
    plan: PrepPlan,
    work: WorkDir,
    site: SiteConfig | None,
    todo: Sequence[int],
    threads: Sequence[int],
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
    for _ in range(sum(threads)):
        tasks.put(None)  # one end mark per thread
    procs = [
        ctx.Process(target=_worker_main, args=(str(work.path), site, tasks, results, n), daemon=True)
        for n in threads
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
                report.task_done(msg[1], msg[2], on_done)
            elif kind == "rss":
                report.worker_peak_rss.append(msg[1])
            elif kind == "error":
                raise _rebuild_error(msg)
            elif kind == "crash":
                raise StorekitError(
                    f"task {msg[1]} failed unexpectedly:\n{msg[2]}", hint="this is a bug; please report it"
                )
        deadline = time.monotonic() + 5
        while len(report.worker_peak_rss) < len(procs) and time.monotonic() < deadline:
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


def _worker_main(work_path: str, site: SiteConfig | None, tasks: Any, results: Any, threads: int) -> None:
    _set_parent_death_signal()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; Ctrl-C reaches it too
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    from pathlib import Path

    work = WorkDir(Path(work_path))
    plan = PrepPlan.from_json(work.plan_file.read_bytes())

    def progress(docs: int, tokens: int, nbytes: int) -> None:
        results.put(("progress", docs, tokens, nbytes))

    def done(index: int, summary: dict[str, Any]) -> None:
        results.put(("done", index, summary))

    try:
        run_tasks_on_threads(plan, work, site, tasks.get, threads, progress, done)
    except StorekitError as exc:
        index = getattr(exc, "task_index", -1)
        results.put(("error", index, type(exc).__name__, exc.message, exc.hint, int(exc.exit_code)))
        return
    except Exception as exc:
        results.put(("crash", getattr(exc, "task_index", -1), traceback.format_exc(limit=8)))
        return
    results.put(("rss", peak_rss()))
