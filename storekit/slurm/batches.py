"""Mapping the tasks a submission runs onto array elements that the cluster's limits allow.

`MaxArraySize` caps the highest array index (index < MaxArraySize), not only the count, so a
submission always numbers its elements 0..E-1. `MaxJobCount` caps the job records the controller
holds; a running element takes one, so a submission asks for at most half of them (the rest stays
for other users) and counts the finalize job too. When the tasks need more elements than that,
each element runs several plan tasks ("tasks per element" is raised), so one array still covers
them all and one `afterok` dependency follows it.

An element map is stored compactly as runs of task indices: a fresh plan of 10,000 tasks is one run,
and element e runs positions [e*k, (e+1)*k) of the expanded list (k = tasks per element).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from storekit.errors import StorekitError

SLURM_DEFAULT_MAX_ARRAY_SIZE = 1001
SLURM_DEFAULT_MAX_JOB_COUNT = 10000


@dataclass(frozen=True)
class ClusterLimits:
    max_array_size: int  # array indices must be below this
    max_job_count: int

    @property
    def max_elements(self) -> int:
        """Elements one submission may use: below MaxArraySize, at most half of MaxJobCount less one
        for the finalize job."""
        return max(1, min(self.max_array_size, self.max_job_count // 2 - 1))


def limits_from_config(config: Mapping[str, str]) -> ClusterLimits:
    """The limits out of `scontrol show config` (Slurm's defaults where a key is missing)."""
    return ClusterLimits(
        max_array_size=_number(config, "MaxArraySize", SLURM_DEFAULT_MAX_ARRAY_SIZE),
        max_job_count=_number(config, "MaxJobCount", SLURM_DEFAULT_MAX_JOB_COUNT),
    )


def _number(config: Mapping[str, str], key: str, default: int) -> int:
    value = config.get(key, "").split()[0] if config.get(key) else ""
    return int(value) if value.isdigit() else default


@dataclass(frozen=True)
class ElementMap:
    """Which plan tasks each array element runs."""

    runs: tuple[tuple[int, int], ...]  # [start, end) runs of task indices, in order
    per_element: int
    elements: int

    @property
    def task_count(self) -> int:
        return sum(end - start for start, end in self.runs)

    def tasks_of(self, element: int) -> list[int]:
        if not 0 <= element < self.elements:
            raise StorekitError(f"array element {element} is outside this submission (0-{self.elements - 1})")
        first, last = element * self.per_element, (element + 1) * self.per_element
        out: list[int] = []
        seen = 0
        for start, end in self.runs:
            length = end - start
            lo, hi = max(first - seen, 0), min(last - seen, length)
            if lo < hi:
                out.extend(range(start + lo, start + hi))
            seen += length
            if seen >= last:
                break
        return out

    @property
    def array_spec(self) -> str:
        return f"0-{self.elements - 1}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": [list(r) for r in self.runs],
            "per_element": self.per_element,
            "elements": self.elements,
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> ElementMap:
        runs = tuple((int(a), int(b)) for a, b in doc["runs"])
        return cls(runs=runs, per_element=int(doc["per_element"]), elements=int(doc["elements"]))


def as_runs(tasks: Sequence[int]) -> tuple[tuple[int, int], ...]:
    runs: list[list[int]] = []
    for index in sorted(set(tasks)):
        if runs and runs[-1][1] == index:
            runs[-1][1] = index + 1
        else:
            runs.append([index, index + 1])
    return tuple((a, b) for a, b in runs)


def map_elements(tasks: Sequence[int], *, per_element: int, limits: ClusterLimits) -> ElementMap:
    """Elements for `tasks` with at least `per_element` tasks each, within the cluster's limits."""
    if not tasks:
        raise StorekitError("nothing to submit: every task is finished")
    count = len(set(tasks))
    per_element = max(per_element, -(-count // limits.max_elements))
    return ElementMap(runs=as_runs(tasks), per_element=per_element, elements=-(-count // per_element))
