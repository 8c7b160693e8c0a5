"""The Suite on N nodes: the same phases, sweeps and cleanup, with node checks and caches per node.

The coordinator creates and removes the run directory on the shared target (as on one machine);
what depends on the node runs on every node: the O_DIRECT probe, the free-space check, environment
capture and page-cache eviction before reads. `--json` gets each node's environment, clock offset
and direct probe under environment.nodes; `direct` is effective only if it was on every node.
"""

from __future__ import annotations

from typing import Any

from storekit.bench import native
from storekit.bench.cluster.coordinator import Cluster
from storekit.bench.plan import DATA_OPS, BenchPlan, PhasePlan
from storekit.bench.scratch import PosixScratch
from storekit.bench.suite import RESIDENT_WARN, Suite


class ClusterSuite(Suite):
    def __init__(self, plan: BenchPlan, scratch: PosixScratch, cluster: Cluster, **kw: Any) -> None:
        super().__init__(plan, scratch, **kw)
        self.cluster = cluster

    def make_runner(self) -> Any:
        return self.cluster

    def _check_direct(self, environment: dict[str, Any]) -> None:
        """Runs once the run directory exists: every node checks itself against it."""
        spec = self.spec
        self.cluster.setup(spec.target, self.scratch.run_root, self.plan.space_needed,
                           direct=spec.direct, meta="meta" in spec.patterns)  # fmt: skip
        nodes = self.cluster.describe()
        environment["nodes"] = nodes
        if environment.get("memory_backed"):
            self._warn_once("the target is memory-backed: numbers measure RAM, not storage")
        refused = [(n["node"], n["direct"]["reason"]) for n in nodes if not n["direct"]["effective"]]
        if not spec.direct:
            self.honesty["direct"] = {"requested": False, "effective": False, "reason": "--no-direct"}
        elif refused:
            why = f"refused on {len(refused)} node(s), e.g. {refused[0][0]}: {refused[0][1]}"
            self.honesty["direct"] = {"requested": True, "effective": False, "reason": why}
            self._warn_once(f"direct: false ({why}); buffered I/O is measured")
        else:
            self.honesty["direct"] = {"requested": True, "effective": True, "reason": None}
        timers = [n["environment"].get("small_file_timer") or {} for n in nodes]
        python = next((t for t in timers if t.get("timer") == "python"), None)
        if python is not None:
            self._warn_once(native.python_timing_note(python.get("reason") or ""))
        skew = max(abs(n["clock"].get("offset_ns", 0)) for n in nodes)
        self.honesty["clocks"] = {
            "method": "NTP-style ping at the handshake; node timestamps moved onto the coordinator's clock",
            "max_abs_offset_ns": skew,
            "max_uncertainty_ns": max(n["clock"].get("uncertainty_ns", 0) for n in nodes),
        }

    def _small_file_timer(self, environment: dict[str, Any]) -> None:
        return None  # built on every node by its agent (environment.nodes[].small_file_timer)

    def _before_read(self, phase: PhasePlan) -> dict[str, Any]:
        infos = self.cluster.evict(phase, self.spec.drop_caches)
        dropped = [i["dropped"] for i in infos]
        reason = next((i["reason"] for i in infos if not i["dropped"]), None)
        self.honesty.setdefault(
            "drop_caches",
            {"requested": self.spec.drop_caches, "done": all(dropped), "reason": reason, "per_node": True},
        )
        if self.spec.drop_caches and not all(dropped):
            self._warn_once(
                f"page cache not dropped on every node: {reason}; the run's own files are evicted"
            )
        info: dict[str, Any] = {"dropped": all(dropped), "reason": reason, "nodes": infos}
        if phase.op in DATA_OPS:
            files = sum(int(i.get("evicted_files") or 0) for i in infos)
            residents = [i["resident_before"] for i in infos if i.get("resident_before") is not None]
            resident = max(residents) if residents else None
            info.update(evicted_files=files, resident_before=resident)
            self._record_eviction(files, resident)
            if resident is not None and resident > RESIDENT_WARN:
                self._warn_once(
                    f"{resident:.0%} of the data was in a node's page cache before a {phase.name} phase: "
                    "the filesystem keeps pages despite O_DIRECT/eviction, reads may measure memory"
                )
        return info
