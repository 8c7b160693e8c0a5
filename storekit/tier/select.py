"""Which candidates a policy selects, and why: a pure function of the policy, the units and the clock.

Each selected unit says why it was chosen (the conditions it met) and, when the policy would free it
but it must stay, why it is only copied. Units not selected are reported with the reason, so a
`--dry-run` answers "why not that one?" as well as "why this one?".
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass

from storekit.checkpoint.scan import COMPLETE
from storekit.policies import Policy
from storekit.tier.candidates import ARCHIVED, Candidate, in_scope
from storekit.units import format_bytes, format_duration


@dataclass(frozen=True)
class Usage:
    used: int
    total: int

    @property
    def fraction(self) -> float:
        return self.used / self.total if self.total else 0.0


@dataclass(frozen=True)
class Choice:
    unit: Candidate
    reason: str  # why selected
    free_source: bool
    keep_reason: str | None  # why it is copied but not freed


@dataclass(frozen=True)
class Passed:
    unit: Candidate
    reason: str  # why not selected

    def to_dict(self) -> dict[str, object]:
        return {"path": self.unit.path, "state": self.unit.state, "reason": self.reason}


@dataclass
class Selection:
    chosen: list[Choice]
    passed: list[Passed]
    note: str | None = None  # e.g. the watermark reading


def select(
    policy: Policy, units: Sequence[Candidate], *, now: float, usage: Usage | None = None
) -> Selection:
    chosen: list[Choice] = []
    passed: list[Passed] = []
    for u in units:
        if not in_scope(u.path, policy.paths) or (policy.action == "recall" and u.state != ARCHIVED):
            continue  # a recall looks at stubs only
        why_not = _rejected(policy, u, now)
        if why_not is not None:
            passed.append(Passed(u, why_not))
            continue
        choice = _choose(policy, u, now)
        if isinstance(choice, Passed):
            passed.append(choice)
        else:
            chosen.append(choice)
    if policy.high_watermark is None or policy.low_watermark is None:
        return Selection(chosen, passed)
    return _watermarks(policy, chosen, passed, usage)


def _rejected(p: Policy, u: Candidate, now: float) -> str | None:
    if p.action == "recall":
        if u.stub is None:
            return f"its stub cannot be read: {u.reason}"
    elif u.state == ARCHIVED:
        return "already moved (a stub stands here)"
    elif u.state != COMPLETE:
        return f"{u.state}: never moved as if whole ({u.reason})"
    size_rule = _size(p, u)
    if size_rule is not None:
        return size_rule
    if p.action == "recall":
        return None
    age = None if u.newest_mtime is None else now - u.newest_mtime
    if p.older_than_s is not None and (age is None or age < p.older_than_s):
        shown = "unknown" if age is None else format_duration(max(0.0, age))
        return f"changed {shown} ago, not older than {format_duration(p.older_than_s)}"
    if p.idle_for_s is not None:
        idle = None if u.run_newest_mtime is None else now - u.run_newest_mtime
        if idle is None or idle < p.idle_for_s:
            shown = "unknown" if idle is None else format_duration(max(0.0, idle))
            return f"its run wrote {shown} ago, not idle for {format_duration(p.idle_for_s)}"
    if u.rank is not None and u.rank < p.keep_last:
        return f"kept: one of the {p.keep_last} newest complete checkpoints of its run"
    if p.keep_every is not None and u.step is not None and u.step % p.keep_every == 0:
        return f"kept: step {u.step} is a multiple of keep_every = {p.keep_every}"
    return None


def _size(p: Policy, u: Candidate) -> str | None:
    if p.larger_than is not None and u.bytes <= p.larger_than:
        return f"{format_bytes(u.bytes)}, not larger than {format_bytes(p.larger_than)}"
    if p.smaller_than is not None and u.bytes >= p.smaller_than:
        return f"{format_bytes(u.bytes)}, not smaller than {format_bytes(p.smaller_than)}"
    return None


def _choose(p: Policy, u: Candidate, now: float) -> Choice | Passed:
    why = _why(p, u, now)
    if p.action == "recall":
        return Choice(u, why, free_source=False, keep_reason=None)
    keep = u.protect or _pinned(p, u)
    if p.action == "purge":
        if keep is not None:
            return Passed(u, f"never freed: {keep}")
        return Choice(u, why, free_source=True, keep_reason=None)
    if not p.free_source:
        return Choice(u, why, free_source=False, keep_reason="the policy keeps sources (free_source = false)")
    return Choice(u, why, free_source=keep is None, keep_reason=keep and f"copied, never freed: {keep}")


def _pinned(p: Policy, u: Candidate) -> str | None:
    glob = next((g for g in p.pinned if any(fnmatch.fnmatchcase(x, g) for x in _ancestors(u.path))), None)
    return None if glob is None else f"pinned ({glob})"


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _why(p: Policy, u: Candidate, now: float) -> str:
    if p.action == "recall":
        assert u.stub is not None
        return f"archived on {u.stub.to_tier} at {u.stub.at}; asked for"
    words = [f"complete ({u.reason})"]
    if p.older_than_s is not None and u.newest_mtime is not None:
        words.append(f"unchanged for {format_duration(now - u.newest_mtime)}")
    if p.idle_for_s is not None and u.run_newest_mtime is not None:
        words.append(f"run idle for {format_duration(now - u.run_newest_mtime)}")
    if p.keep_last:
        words.append(f"not among the {p.keep_last} newest")
    if p.larger_than is not None or p.smaller_than is not None:
        words.append(format_bytes(u.bytes))
    return "; ".join(words)


def _watermarks(p: Policy, chosen: list[Choice], passed: list[Passed], usage: Usage | None) -> Selection:
    assert p.high_watermark is not None and p.low_watermark is not None
    if usage is None or usage.total <= 0:
        note = "free space unknown on this tier: watermarks cannot apply, nothing selected"
        return Selection([], passed + [Passed(c.unit, note) for c in chosen], note)
    pct = f"{usage.fraction:.1%} used"
    if usage.fraction < p.high_watermark:
        note = f"{pct}, below the high watermark {p.high_watermark:.0%}"
        return Selection([], passed + [Passed(c.unit, note) for c in chosen], note)
    target = int(p.low_watermark * usage.total)
    used = usage.used
    keep: list[Choice] = []
    rest: list[Passed] = []
    for c in sorted(chosen, key=lambda c: (c.unit.newest_mtime or 0.0, c.unit.path)):  # oldest first
        if used <= target:
            rest.append(Passed(c.unit, f"the low watermark {p.low_watermark:.0%} is reached without it"))
            continue
        keep.append(c)
        if c.free_source:
            used -= c.unit.bytes
    note = f"{pct} ≥ high watermark {p.high_watermark:.0%}; selected down to {used / usage.total:.1%}"
    return Selection(keep, passed + rest, note)
