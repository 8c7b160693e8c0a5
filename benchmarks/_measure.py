"""Run one command and measure it as a whole process tree: wall time, CPU seconds, peak memory.

- CPU seconds: user+sys of every descendant, from getrusage(RUSAGE_CHILDREN) deltas. The bench process
  makes itself a child subreaper, so helpers that outlive their parent (a multiprocessing forkserver,
  daemonised workers) are re-parented to us and reaped here; their CPU time is counted too.
- Peak memory: /proc is sampled every `interval` seconds for all our descendants; we keep the maximum
  over time of (a) the sum of RSS over the tree, (b) the sum of PSS over the tree (shared pages
  counted once, split between sharers; sampled less often, see _Sampler), (c) the largest
  single-process RSS, from each process's VmHWM (its own peak, so spikes between samples count).
  The kernel's ru_maxrss is not used: Linux carries the forking parent's peak across exec into it.
- The wall time ends when the command and every descendant have exited.
- The harness keeps off the measured cores: it blocks in wait4 rather than polling, and a sample
  walks the tree from our pid through /proc/PID/task/TID/children instead of reading every process
  of the host (which cost ~2.5 % of a core: on an N-core run it stole from the command, on a
  1-core run pinned beside a free core it did not, so it biased parallel efficiency downwards).
  Its own CPU time is reported as harness_cpu_s.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field

PAGE = os.sysconf("SC_PAGE_SIZE")


def byte_compile(python: str, tree: str | os.PathLike[str]) -> None:
    """Byte-compile `tree`/storekit as `pip install` does for an installed package. A checkout run
    through PYTHONPATH under PYTHONDONTWRITEBYTECODE=1 (as on this host) compiles every module from
    source in each process, ~0.1 s a start that no installed copy pays and no compiled peer has."""
    subprocess.run([python, "-m", "compileall", "-q", "-j0", os.path.join(tree, "storekit")], check=True)


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
    kernel_maxrss: int  # ru_maxrss of the direct child (bytes); includes our RSS at fork: not used
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


def _children(pid: int) -> list[int]:
    """The children of every thread of `pid` (/proc/PID/task/TID/children): a walk from our own pid
    reads a few files per process of the tree, where scanning /proc read one per process of the host."""
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                found.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return found


def _descendants_by_scan(root: int) -> list[int]:
    """Every /proc/N/stat read (kernels without CONFIG_PROC_CHILDREN)."""
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


HAVE_CHILDREN_FILES = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def _descendants(root: int) -> list[int]:
    if not HAVE_CHILDREN_FILES:
        return _descendants_by_scan(root)
    out: list[int] = []
    stack = _children(root)
    while stack:
        pid = stack.pop()
        out.append(pid)
        stack.extend(_children(pid))
    return out


@dataclass(frozen=True)
class HostCpu:
    """The whole host's CPU-seconds since boot (/proc/stat), every process counted: busy (user, nice,
    system, irq, softirq), idle (idle, iowait) and steal (taken by the hypervisor)."""

    busy: float
    idle: float
    steal: float


def host_cpu() -> HostCpu:
    with open("/proc/stat") as f:
        user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in f.readline().split()[1:9])
    hz = os.sysconf("SC_CLK_TCK")
    return HostCpu((user + nice + system + irq + softirq) / hz, (idle + iowait) / hz, steal / hz)


def _rss_hwm(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in bytes. VmHWM is the process's own peak since its exec, so a spike between two
    samples still shows (unlike ru_maxrss, which keeps the parent's RSS at fork across the exec)."""
    rss = hwm = 0
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith(b"VmHWM:"):
                    hwm = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return rss, hwm


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class _Sampler(threading.Thread):
    """RSS (cheap: statm) every `interval`; PSS (smaps_rollup walks the page tables: ~40 ms per GiB
    mapped, charged to us and stealing CPU from the measured tree) at most every `pss_interval`, and
    only while the tree's RSS is above the PSS peak so far (PSS <= RSS, so only then can it rise)."""

    def __init__(self, interval: float, pss_interval: float) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.pss_interval = pss_interval
        self.last_pss = 0.0
        self.me = os.getpid()
        self.stop = threading.Event()
        self.tree_rss = self.tree_pss = self.single_rss = 0
        self.max_procs = 0
        self.samples = 0

    def sample(self) -> None:
        pids = _descendants(self.me)
        rss_hwm = [_rss_hwm(pid) for pid in pids]
        tree_rss = sum(rss for rss, _ in rss_hwm)
        self.tree_rss = max(self.tree_rss, tree_rss)
        self.single_rss = max(self.single_rss, max((max(r, h) for r, h in rss_hwm), default=0))
        now = time.monotonic()
        if tree_rss > self.tree_pss and now - self.last_pss >= self.pss_interval:
            self.last_pss = now
            self.tree_pss = max(self.tree_pss, sum(_pss(pid) for pid in pids))
        self.max_procs = max(self.max_procs, len(pids))
        self.samples += 1

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            self.sample()


def _reap_orphans(ours: set[int]) -> None:
    """Wait for the command's descendants that outlived it (re-parented to us: we are a subreaper) so
    their CPU time is counted. `ours`: our own children from before the command (a multiprocessing
    forkserver, say), which are not its and may live on; only a pid we know is the command's is
    waited for, so nobody else's exit status is taken."""
    while True:
        left = [pid for pid in _descendants(os.getpid()) if pid not in ours]
        if not left:
            return
        for pid in left:
            with contextlib.suppress(ChildProcessError):  # not our child: its own parent reaps it
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.02)


def run_measured(
    cmd: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    cpus: str | None = None,
    interval: float = 0.1,
    pss_interval: float = 1.0,
    timeout: float | None = None,
) -> Measurement:
    """Run cmd (pinned to `cpus` with taskset if given) and measure the whole tree."""
    full = (["taskset", "-c", cpus] if cpus else []) + cmd
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    self_before = resource.getrusage(resource.RUSAGE_SELF)
    sampler = _Sampler(interval, pss_interval)
    ours = set(_descendants(os.getpid()))
    out_path = f"/tmp/storekit-bench-{os.getpid()}-{time.monotonic_ns()}"
    with open(out_path + ".out", "w+b") as fout, open(out_path + ".err", "w+b") as ferr:
        t0 = time.perf_counter()
        proc = subprocess.Popen(full, env=env, cwd=cwd, stdout=fout, stderr=ferr)
        sampler.start()
        # block in wait4 (no polling loop beside the measured command); a timer enforces the timeout
        killer = threading.Timer(timeout, proc.kill) if timeout is not None else None
        if killer is not None:
            killer.daemon = True
            killer.start()
        _pid, status, ru = os.wait4(proc.pid, 0)
        if killer is not None:
            killer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        _reap_orphans(ours)
        wall = time.perf_counter() - t0
        sampler.stop.set()
        sampler.join()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self_after = resource.getrusage(resource.RUSAGE_SELF)
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
        extra={
            "harness_cpu_s": self_after.ru_utime
            + self_after.ru_stime
            - self_before.ru_utime
            - self_before.ru_stime
        },
    )
