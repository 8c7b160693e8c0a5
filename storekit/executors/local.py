"""The `local` executor: worker threads of one process, in as many processes as it takes.

How many threads share a process is the job's call (`Job.threads_per_process`): where the Python side
of a task is small (prepare with `tokenizers`, ~4 % under the GIL) two threads sharing one tokenizer
spend ~10% less CPU per token than two forked processes with a copy each; where it is large (the
fast BPE engine, ~22 %) the GIL serialises it and one thread per process wins. Past that many
threads, more processes. $STOREKIT_THREADS_PER_PROCESS overrides the job (benchmarks compare both).
A single process runs its threads in the caller; several are forked and die with the parent
(PR_SET_PDEATHSIG), so a SIGKILLed run leaves no orphans, and a stopped run leaves only whole
completion records behind. A failed task leaves a failure record (JobDir.record_failure).
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from storekit import faults
from storekit.errors import ExitCode, Interrupted, StorekitError, UsageError, failure_of
from storekit.executors.base import DoneFn, Job, ProgressFn, RunReport, SkipFn, Stopped
from storekit.interrupts import signals_deferred

_PR_SET_PDEATHSIG = 1
THREADS_PER_PROCESS = 2  # the default; the measured gain is for 2, more make the GIL the limit sooner
THREADS_ENV = "STOREKIT_THREADS_PER_PROCESS"
PROGRESS_EVERY_S = 0.25  # how often a worker process reports progress (its task ends report at once)
_STOP_SIGNALS = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT", signal.SIGUSR1: "SIGUSR1"}


def split_workers(workers: int, per_process: int = THREADS_PER_PROCESS) -> list[int]:
    """Threads per process for `workers` cores: as few processes as `per_process` threads allow."""
    processes = -(-workers // max(1, per_process))
    return [workers // processes + (i < workers % processes) for i in range(processes)]


def threads_per_process(job: Job) -> int:
    """The job's choice, unless $STOREKIT_THREADS_PER_PROCESS (a positive integer) says otherwise."""
    given = os.environ.get(THREADS_ENV, "")
    if not given:
        return max(1, int(job.threads_per_process()))
    try:
        value = int(given)
    except ValueError:
        value = 0
    if value < 1:
        raise UsageError(f"${THREADS_ENV} must be a positive integer, not {given!r}")
    return value


class LocalExecutor:
    name = "local"
    detached = False  # run() is the whole run: this command waits for every task

    def __init__(self, *, log: str | None = None, own_temps_only: bool = False) -> None:
        self.log = log  # named in failure records (a Slurm element's log file)
        # array tasks share the work dir: a failure removes this run's temp dirs, not everyone's
        self.own_temps_only = own_temps_only

    def run(
        self,
        job: Job,
        todo: Sequence[int],
        *,
        workers: int,
        progress: ProgressFn,
        on_done: DoneFn | None = None,
        skip: SkipFn | None = None,
    ) -> RunReport:
        """Run the tasks in `todo`; raises the first task's error, or Interrupted on a stop signal.

        `skip(task)` is asked right before each task starts (in the thread that would run it): a
        task it says needs no run (another Slurm element completed it, say) is counted in
        `tasks_skipped`, and neither run nor passed to `on_done`."""
        report = RunReport()
        started = time.monotonic()
        if not todo:
            return report
        workers = max(1, min(workers, len(todo)))
        # largest first (stable): a big task started last would leave the other cores idle at the end
        todo = sorted(todo, key=lambda i: -job.task_cost(i))
        threads = split_workers(workers, threads_per_process(job))
        counted = _Counter(job, report, on_done)
        try:
            if len(threads) == 1:
                _run_here(job, todo, threads[0], progress, counted, self.log, skip)
            else:
                _run_pool(job, todo, threads, progress, counted, report, self.log, skip)
        except KeyboardInterrupt:
            job.dir.remove_temps(own=self.own_temps_only)
            raise _interrupted(report, len(todo)) from None
        except BaseException:
            job.dir.remove_temps(own=self.own_temps_only)  # tasks cut short: only whole records stay
            raise
        finally:
            report.seconds = time.monotonic() - started
        return report


class _Counter:
    """A completion record exists: count it, tell the caller (one call at a time: under the
    threads' lock or from the pool loop)."""

    def __init__(self, job: Job, report: RunReport, on_done: DoneFn | None) -> None:
        self.point = f"{job.kind}.task-done"
        self.report = report
        self.on_done = on_done

    def __call__(self, index: int, summary: dict[str, Any]) -> None:
        self.report.tasks_run += 1
        if self.on_done:
            self.on_done(index, summary)
        faults.point(self.point)

    def skipped(self, index: int) -> None:
        self.report.tasks_skipped += 1
        faults.point("executor.task-skipped")


def _interrupted(report: RunReport, total: int) -> Interrupted:
    return Interrupted(
        f"stopped by a signal after {report.tasks_run} of {total} remaining tasks; finished tasks are kept",
        hint="rerun the same command to resume",
    )


def run_on_threads(
    job: Job,
    next_task: Callable[[], int | None],
    threads: int,
    progress: ProgressFn,
    done: DoneFn,
    log: str | None = None,
    skip: SkipFn | None = None,
    skipped: Callable[[int], None] = lambda index: None,
) -> None:
    """Run tasks from `next_task()` until it returns None, on `threads` threads of this process;
    one that `skip` says needs no run goes to `skipped` instead (both under the threads' lock).

    The first failure is recorded (failed/NNNNNN.json), stops the other threads (between two
    steps) and is raised here; so is KeyboardInterrupt, once every thread has stopped and removed
    its unfinished task. Tasks never run in the calling thread, even one: a stop signal raises
    KeyboardInterrupt in the main thread wherever it is, and between a commit's hand-off to the
    background committer and its bookkeeping that would lose track of a commit still renaming.
    """
    job.setup_process()
    stop = threading.Event()
    failures: list[BaseException] = []
    lock = threading.Lock()

    def locked_progress(docs: int, tokens: int, nbytes: int) -> None:
        with lock:
            progress(docs, tokens, nbytes)

    def locked_done(index: int, summary: dict[str, Any]) -> None:
        with lock:
            done(index, summary)

    def locked_skipped(index: int) -> bool:
        if skip is None or not skip(index):
            return False
        with lock:
            skipped(index)
        return True

    def loop(finished: threading.Event) -> None:
        runner = job.runner(stop.is_set)
        index: int | None = -1
        try:
            while not stop.is_set() and (index := next_task()) is not None:
                faults.point("executor.task-claimed")
                if not locked_skipped(index):  # checked last: it may have been completed just now
                    runner.run(index, locked_progress, locked_done)
            runner.drain()
        except BaseException as exc:
            # commits still running in the background touch temp dirs: let them end before
            # anyone removes temps (a rename racing a removal could publish a partial task)
            with contextlib.suppress(BaseException):
                runner.drain()
            if isinstance(exc, Stopped):
                return
            with contextlib.suppress(Exception):
                exc.task_index = index  # type: ignore[attr-defined]  # for the worker's report
            _record_failure(job, index, exc, log)
            failures.append(exc)
            stop.set()
        finally:
            finished.set()  # the last thing this thread does to the work dir is behind it

    ends = [threading.Event() for _ in range(threads)]
    pool = [threading.Thread(target=loop, args=(e,), name=f"storekit-task-{i}") for i, e in enumerate(ends)]
    started = 0
    try:
        # a stop signal cutting start() in two would leave a thread running that nobody waits
        # for (the caller then removes temps under it): it is taken once the threads are started
        with signals_deferred():
            for t in pool:
                t.start()
                started += 1
                faults.point("executor.thread-started")
        _wait_for(ends)
    except BaseException:
        stop.set()  # each thread ends its task or discards it at its next step, then drains
        faults.point("executor.stopping")
        _wait_through_signals(ends[:started])  # the caller removes temp dirs: no thread may still write
        raise
    if failures:
        raise failures[0]


def _wait_for(ends: Sequence[threading.Event]) -> None:
    """Until every thread has set its end event. Not Thread.join: on Python 3.11 a signal's
    KeyboardInterrupt raised inside join() marks a still-running thread as stopped (the bpo-45274
    handling releases the lock the live thread holds), so is_alive() then lies and temps would be
    removed under a thread still committing. Polling a flag with sleep() has no such state."""
    while not all(e.is_set() for e in ends):
        time.sleep(0.02)


def _wait_through_signals(ends: Sequence[threading.Event]) -> None:
    while True:
        with contextlib.suppress(KeyboardInterrupt):  # a second stop: they are stopping already
            _wait_for(ends)
            return


def _record_failure(job: Job, index: int | None, exc: BaseException, log: str | None) -> None:
    if index is None or index < 0 or isinstance(exc, KeyboardInterrupt):
        return
    message, code = failure_of(exc)
    with contextlib.suppress(Exception):  # the task's own error is what the caller must see
        job.dir.record_failure(index, message, exit_code=code, log=log)


def _run_here(
    job: Job,
    todo: Sequence[int],
    threads: int,
    progress: ProgressFn,
    done: _Counter,
    log: str | None,
    skip: SkipFn | None,
) -> None:
    pending = iter(todo)
    take = threading.Lock()

    def next_task() -> int | None:
        with take:
            return next(pending, None)

    run_on_threads(job, next_task, threads, progress, done, log, skip, done.skipped)


def _run_pool(
    job: Job,
    todo: Sequence[int],
    threads: Sequence[int],
    progress: ProgressFn,
    done: _Counter,
    report: RunReport,
    log: str | None,
    skip: SkipFn | None,
) -> None:
    import multiprocessing as mp  # forked workers only: a Slurm element (threads) never loads it

    job.setup_process()
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context("spawn")
    tasks: Any = ctx.Queue()
    results: Any = ctx.Queue()
    for index in todo:
        tasks.put(index)
    for _ in range(sum(threads)):
        tasks.put(None)  # one end mark per thread
    procs = [
        ctx.Process(target=_worker_main, args=(job, tasks, results, n, log, skip), daemon=True)
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
                done(msg[1], msg[2])
            elif kind == "skipped":
                remaining.discard(msg[1])
                done.skipped(msg[1])
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
    import ctypes

    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _worker_main(
    job: Job, tasks: Any, results: Any, threads: int, log: str | None, skip: SkipFn | None = None
) -> None:
    _set_parent_death_signal()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; Ctrl-C reaches it too
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)

    # progress is summed here and sent a few times a second, not per batch: each message costs a
    # pickle, a wake-up of this process's feeder thread and of the parent, on cores the tasks use
    pending = [0, 0, 0]
    sent = [time.monotonic()]

    def send_progress() -> None:
        if any(pending):
            results.put(("progress", *pending))
            pending[:] = [0, 0, 0]
        sent[0] = time.monotonic()

    def progress(docs: int, tokens: int, nbytes: int) -> None:
        pending[0] += docs
        pending[1] += tokens
        pending[2] += nbytes
        if time.monotonic() - sent[0] >= PROGRESS_EVERY_S:
            send_progress()

    def done(index: int, summary: dict[str, Any]) -> None:
        send_progress()  # a finished task's counts are in before it is
        results.put(("done", index, summary))

    def skipped(index: int) -> None:
        results.put(("skipped", index))

    try:
        run_on_threads(job, tasks.get, threads, progress, done, log, skip, skipped)
    except StorekitError as exc:
        index = getattr(exc, "task_index", -1)
        results.put(("error", index, type(exc).__name__, exc.message, exc.hint, int(exc.exit_code)))
        return
    except Exception as exc:
        results.put(("crash", getattr(exc, "task_index", -1), traceback.format_exc(limit=8)))
        return
    results.put(("rss", peak_rss()))


def peak_rss() -> int:
    """Peak resident set size of this process in bytes (VmHWM)."""
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
