"""Run one command and measure it as a whole process tree: wall time, CPU seconds, peak memory.

- CPU seconds: user+sys of every descendant, from getrusage(RUSAGE_CHILDREN) deltas. The bench process
  makes itself a child subreaper, so helpers that outlive their parent (a multiprocessing forkserver,
  daemonised workers) are re-parented to us and reaped here; their CPU time is counted too.
- Peak memory: /proc is sampled every `interval` seconds for all our descendants; we keep the maximum
  over time of (a) the sum of RSS over the tree, (b) the sum of PSS over the tree (shared pages
  counted once, split between sharers), (c) the largest single-process RSS. The kernel's own
  ru_maxrss of the waited-for child (largest single process among it and its reaped descendants) is
  kept as a cross-check for spikes between samples.
- The wall time ends when the command and every descendant have exited.
"""

from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field

PAGE = os.sysconf("SC_PAGE_SIZE")
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except OSError:
        return False


@dataclass
class Measurement:
    cmd: list[str]
    returncode: int
    wall_s: float
    user_s: float
    sys_s: float
    peak_tree_rss: int  # bytes
    peak_tree_pss: int
    peak_single_rss: int
    kernel_maxrss: int  # ru_maxrss of the direct child (bytes)
    max_processes: int
    samples: int
    stdout: str = ""
    stderr: str = ""
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def cpu_s(self) -> float:
        return self.user_s + self.sys_s

    def summary(self) -> dict[str, object]:
        d = asdict(self)
        d.pop("stdout")
        d.pop("stderr")
        d["cpu_s"] = self.cpu_s
        return d


def _descendants(root: int) -> list[int]:
    parent_of: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # the command name may contain spaces/parens: fields after the last ')'
        rest = stat[stat.rfind(b")") + 2 :].split()
        parent_of[int(name)] = int(rest[1])
    children: dict[int, list[int]] = {}
    for pid, ppid in parent_of.items():
        children.setdefault(ppid, []).append(pid)
    out: list[int] = []
    stack = list(children.get(root, []))
    while stack:
        pid = stack.pop()
        out.append(pid)
        stack.extend(children.get(pid, []))
    return out


def _rss_pss(pid: int, with_pss: bool) -> tuple[int, int]:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            rss = int(f.read().split()[1]) * PAGE
        pss = 0
        if with_pss:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
                for line in f:
                    if line.startswith(b"Pss:"):
                        pss = int(line.split()[1]) * 1024
                        break
        return rss, pss
    except (OSError, ValueError, IndexError):
        return 0, 0


class _Sampler(threading.Thread):
    def __init__(self, interval: float) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.me = os.getpid()
        self.stop = threading.Event()
        self.tree_rss = self.tree_pss = self.single_rss = 0
        self.max_procs = 0
        self.samples = 0

    def sample(self) -> None:
        pids = _descendants(self.me)
        tree_rss = tree_pss = 0
        for pid in pids:
            rss, pss = _rss_pss(pid, with_pss=True)
            tree_rss += rss
            tree_pss += pss
            self.single_rss = max(self.single_rss, rss)
        self.tree_rss = max(self.tree_rss, tree_rss)
        self.tree_pss = max(self.tree_pss, tree_pss)
        self.max_procs = max(self.max_procs, len(pids))
        self.samples += 1

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            self.sample()


def _reap_orphans() -> None:
    """Wait for descendants re-parented to us (we are a subreaper) so their CPU time is counted."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if not _descendants(os.getpid()):
                return
            time.sleep(0.02)


def run_measured(
    cmd: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    cpus: str | None = None,
    interval: float = 0.1,
    timeout: float | None = None,
) -> Measurement:
    """Run cmd (pinned to `cpus` with taskset if given) and measure the whole tree."""
    full = (["taskset", "-c", cpus] if cpus else []) + cmd
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    sampler = _Sampler(interval)
    out_path = f"/tmp/storekit-bench-{os.getpid()}-{time.monotonic_ns()}"
    with open(out_path + ".out", "w+b") as fout, open(out_path + ".err", "w+b") as ferr:
        t0 = time.perf_counter()
        proc = subprocess.Popen(full, env=env, cwd=cwd, stdout=fout, stderr=ferr)
        sampler.start()
        deadline = None if timeout is None else t0 + timeout
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if deadline and time.perf_counter() > deadline:
                proc.kill()
            time.sleep(0.01)
        proc.returncode = os.waitstatus_to_exitcode(status)
        _reap_orphans()
        wall = time.perf_counter() - t0
        sampler.stop.set()
        sampler.join()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        fout.seek(0)
        ferr.seek(0)
        stdout = fout.read().decode(errors="replace")
        stderr = ferr.read().decode(errors="replace")
    for suffix in (".out", ".err"):
        os.unlink(out_path + suffix)
    return Measurement(
        cmd=full,
        returncode=proc.returncode,
        wall_s=wall,
        user_s=after.ru_utime - before.ru_utime,
        sys_s=after.ru_stime - before.ru_stime,
        peak_tree_rss=sampler.tree_rss,
        peak_tree_pss=sampler.tree_pss,
        peak_single_rss=max(sampler.single_rss, 0),
        kernel_maxrss=ru.ru_maxrss * 1024,
        max_processes=sampler.max_procs,
        samples=sampler.samples,
        stdout=stdout,
        stderr=stderr,
    )
