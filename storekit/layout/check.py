"""`storekit layout check`: every violation of the layout, with its path and rule.

One streaming pass over the tier (parents before children), so memory grows with the number of
committed-level directories (runs, steps, dataset versions), not with the number of files.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from storekit.checkpoint.scan import INCOMPLETE, scan_area_run
from storekit.errors import StorekitError
from storekit.layout import fsapply
from storekit.layout.spec import AreaSpec, LayoutSpec
from storekit.lease import binding_lease, covering_lease, is_lease_name
from storekit.paths import resolves_outside
from storekit.store import Entry, Store
from storekit.stubs import TIER_JOURNAL_DIR, is_stub_name, parse_stub, unit_rel_of
from storekit.units import format_bytes, format_duration

RULES = {
    "missing-area": "an area of the layout does not exist",
    "unknown-entry": "an entry at the top level that is not an area of the layout",
    "misnamed": "a directory whose name does not match its level's pattern",
    "unexpected-file": "a file where the layout expects a directory",
    "incomplete": "a leftover of an interrupted writer (temp or partial name): half-written data",
    "missing-manifest": "a directory that is not committed: its manifest is missing",
    "ttl-expired": "a scratch entry older than its area's TTL",
    "mode": "wrong permissions",
    "quota": "an area over its quota",
    "fs-settings": "a quota or striping the file system holds that differs from the layout's (init sets it)",
    "symlink-escape": "a symlink pointing outside the tier root",
    "incomplete-checkpoint": "a checkpoint its writer did not finish: names the writer and missing marker",
    "bad-pointer": "a tracker or latest pointer naming a missing or incomplete unit, or leaving its run",
    "ambiguous-checkpoint": "a checkpoint carrying the commit markers of two writers",
    "bad-stub": "a *.storekit-stub (left by storekit tier for a moved unit) that cannot be read",
    "stub-beside-unit": "a moved unit that is back while its stub remains (an interrupted recall)",
}
MAX_PER_RULE = 1000  # per area: enough to act on, bounded output on huge trees


@dataclass(frozen=True)
class Finding:
    rule: str
    path: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass
class CheckReport:
    tier: str
    url: str
    layout: str
    findings: list[Finding] = field(default_factory=list)
    truncated: dict[str, int] = field(default_factory=dict)  # rule -> findings not listed
    entries_scanned: int = 0
    skipped: list[str] = field(default_factory=list)
    in_progress: list[str] = field(default_factory=list)  # temp entries a live lease covers
    error: str | None = None  # the tier could not be checked (unreachable, missing root)

    @property
    def clean(self) -> bool:
        return not self.findings and self.error is None

    def to_dict(self) -> dict[str, object]:
        return {
            "tier": self.tier,
            "url": self.url,
            "layout": self.layout,
            "clean": self.clean,
            "reachable": self.error is None,
            "error": self.error,
            "findings": [f.to_dict() for f in self.findings],
            "truncated": self.truncated,
            "entries_scanned": self.entries_scanned,
            "skipped": self.skipped,
            "in_progress": self.in_progress,
            "counts": {
                rule: sum(1 for f in self.findings if f.rule == rule) + self.truncated.get(rule, 0)
                for rule in RULES
                if any(f.rule == rule for f in self.findings) or rule in self.truncated
            },
        }


class _AreaScan:
    """State for one area while its entries stream past."""

    def __init__(
        self, area: AreaSpec, spec: LayoutSpec, store: Store, report: CheckReport, now: float
    ) -> None:
        self.area, self.spec, self.store, self.report, self.now = area, spec, store, report, now
        self.skip: list[str] = []  # subtrees already reported as a whole
        self.committed_dirs: dict[str, bool] = {}  # dirs at a committed_by level -> seen its file
        self.newest: dict[str, float] = {}  # first-level entry -> newest mtime below (for TTL)
        self.bytes = 0
        self.files = 0
        self.per_rule: dict[str, int] = {}
        self.runs: list[str] = []  # directories whose children are checkpoint units (writer areas)

    def add(self, rule: str, path: str, message: str) -> None:
        n = self.per_rule.get(rule, 0) + 1
        self.per_rule[rule] = n
        if n > MAX_PER_RULE:
            self.report.truncated[rule] = self.report.truncated.get(rule, 0) + 1
        else:
            self.report.findings.append(Finding(rule, path, message))

    def visit(self, entry: Entry) -> None:
        rel_parts = entry.path.split("/")[1:]  # below the area
        depth = len(rel_parts)
        if not entry.is_dir:
            self.bytes += entry.size
            self.files += 1
        if self.area.ttl_seconds is not None and entry.mtime is not None:
            top = rel_parts[0]
            self.newest[top] = max(self.newest.get(top, 0.0), entry.mtime)
        self._note_commit_file(entry, rel_parts)
        if any(entry.path.startswith(s) for s in self.skip):
            return
        if entry.is_link:
            self._check_link(entry)
            return
        if self.area.writers and depth > len(self.area.levels):
            self._check_mode(entry)
            return  # units, trackers and writer temp names: judged by scan_run in finish()
        if is_lease_name(entry.name) or self.spec.is_temp_name(entry.name):
            if self._leased(entry):
                self.report.in_progress.append(entry.path)
            elif is_lease_name(entry.name):
                self.add("incomplete", entry.path, "the lease of a writer that is gone (stale)")
            else:
                self.add("incomplete", entry.path, "leftover of an interrupted write (temp/partial name)")
            self.skip.append(entry.path + "/")
            return
        self._check_mode(entry)
        levels = self.area.levels
        if not entry.is_dir and depth == len(levels) and is_stub_name(entry.name):
            self._check_stub(entry)
            return
        if depth <= len(levels):
            level = levels[depth - 1]
            if not entry.is_dir:
                self.add("unexpected-file", entry.path, f"a file where a {level.name} directory is expected")
                return
            if not level.matches(entry.name):
                self.add(
                    "misnamed",
                    entry.path,
                    f"{level.name} name {entry.name!r} does not match {level.pattern.pattern!r}",
                )
                self.skip.append(entry.path + "/")
                return
            if level.committed_by:
                self.committed_dirs.setdefault(entry.path, False)
            if self.area.writers and depth == len(levels):
                self.runs.append(entry.path)

    def _check_stub(self, entry: Entry) -> None:
        """A moved dataset's stub: readable, and not beside the dataset it stands for."""
        try:
            parse_stub(self.store.read_bytes(entry.path), entry.path)
        except StorekitError as exc:
            self.add("bad-stub", entry.path, exc.message.removeprefix(f"{entry.path}: "))
            return
        unit = unit_rel_of(entry.path)
        if self.store.exists(unit):
            self.add(
                "stub-beside-unit", entry.path, f"{unit} is here and its stub too (an interrupted recall?)"
            )

    def _note_commit_file(self, entry: Entry, rel_parts: list[str]) -> None:
        parent = entry.path.rsplit("/", 1)[0]
        if not entry.is_dir and parent in self.committed_dirs:
            level = self.area.levels[len(rel_parts) - 2]
            if entry.name == level.committed_by:
                self.committed_dirs[parent] = True

    def _leased(self, entry: Entry) -> bool:
        """A live writer's temp entry or lease file: in progress, not a finding (POSIX tiers)."""
        root = self.store.local_path("") if self.store.capabilities.directories else None
        if root is None:
            return False
        path = Path(root) / entry.path
        if is_lease_name(entry.name):
            return binding_lease(path) is not None
        return covering_lease(path, Path(root)) is not None

    def _check_link(self, entry: Entry) -> None:
        target = link_escape(self.store, entry)
        if target is not None:
            self.add("symlink-escape", entry.path, f"symlink resolves to {target}, outside the tier root")

    def _check_mode(self, entry: Entry) -> None:
        if entry.mode is None or not self.area.read_only:
            return
        if entry.mode & 0o022:
            self.add(
                "mode",
                entry.path,
                f"mode {entry.mode:04o} is group/world-writable in read-only area {self.area.name}",
            )

    def _check_runs(self) -> None:
        area = self.area
        runs = self.runs if area.levels else [area.name]
        for run in runs:
            if any(run.startswith(s) for s in self.skip):
                continue
            scan = scan_area_run(self.store, run, area, temp=self.spec.temp_patterns, now=self.now)
            for problem in scan.problems:
                self.add(problem.rule, problem.path, problem.message)
            for unit in scan.units:
                if unit.state != INCOMPLETE:
                    continue  # complete, or in progress (changed within the quiet period)
                rule = "incomplete" if unit.is_temp else "incomplete-checkpoint"
                self.add(rule, unit.path, unit.reason)

    def finish(self) -> None:
        if self.area.writers:
            self._check_runs()
        for path, committed in sorted(self.committed_dirs.items()):
            if not committed and not any(path.startswith(s) for s in self.skip):
                level = self.area.levels[len(path.split("/")) - 2]
                self.add("missing-manifest", path, f"no {level.committed_by}: not committed (half-written?)")
        ttl = self.area.ttl_seconds
        if ttl is not None:
            for top, newest in sorted(self.newest.items()):
                age = self.now - newest
                if age > ttl:
                    self.add(
                        "ttl-expired",
                        f"{self.area.name}/{top}",
                        f"last changed {format_duration(age)} ago; TTL is {format_duration(ttl)}",
                    )
        quota = self.area.quota_bytes
        if quota is not None and self.bytes > quota:
            self.add("quota", self.area.name, f"{format_bytes(self.bytes)} used, quota {format_bytes(quota)}")
        qfiles = self.area.quota_files
        if qfiles is not None and self.files > qfiles:
            self.add("quota", self.area.name, f"{self.files} files, quota {qfiles} files")


def link_escape(store: Store, entry: Entry) -> str | None:
    """Where a symlink inside a POSIX tier points, if that is outside the root; else None."""
    if not entry.is_link or not store.capabilities.directories:
        return None
    return resolves_outside(
        os.path.join(store.root, entry.path), store.root
    )  # not full(): it refuses escapes


def check_layout(spec: LayoutSpec, store: Store, *, now: float | None = None) -> CheckReport:
    report = CheckReport(tier=store.name, url=store.display_url, layout=spec.name)
    now = time.time() if now is None else now
    if not store.capabilities.posix_modes:
        report.skipped.append("mode: the tier has no POSIX permissions")
    top = {e.name: e for e in store.list("")}
    for name, top_entry in sorted(top.items()):
        escaped = link_escape(store, top_entry)
        if escaped is not None:
            report.findings.append(
                Finding("symlink-escape", name, f"symlink resolves to {escaped}, outside the tier root")
            )
            continue
        if spec.area(name) is not None or (name == TIER_JOURNAL_DIR and top_entry.is_dir):
            continue  # the tier mover's journals are storekit's own
        if is_lease_name(name) and not top_entry.is_dir:  # e.g. a node's `storekit tier --drain`
            local = store.local_path(name) if store.capabilities.directories else None
            if local is not None and binding_lease(Path(local)) is not None:
                report.in_progress.append(name)
            else:
                report.findings.append(Finding("incomplete", name, "the lease of a run that is gone (stale)"))
            continue
        if spec.is_temp_name(name):
            report.findings.append(Finding("incomplete", name, "leftover of an interrupted write"))
        else:
            report.findings.append(Finding("unknown-entry", name, "not an area of layout " + spec.name))
    for area in spec.areas:
        entry = top.get(area.name)
        if entry is not None and entry.is_link:
            if link_escape(store, entry) is None:  # escaping links were reported above
                report.findings.append(
                    Finding(
                        "unexpected-file",
                        area.name,
                        "a symlink where the area directory belongs (never followed)",
                    )
                )
            continue
        if entry is None:
            report.findings.append(Finding("missing-area", area.name, "missing; run storekit init"))
            continue
        if not entry.is_dir:
            report.findings.append(
                Finding("unexpected-file", area.name, "a file where the area directory belongs")
            )
            continue
        if store.capabilities.posix_modes and entry.mode is not None and entry.mode != area.mode:
            report.findings.append(
                Finding("mode", area.name, f"mode {entry.mode:04o}, layout wants {area.mode:04o}")
            )
        scan = _AreaScan(area, spec, store, report, now)
        for sub in _walk(store, area.name):
            report.entries_scanned += 1
            scan.visit(sub)
        scan.finish()
    report.findings += [
        Finding("fs-settings", area, problem) for area, problem in fsapply.differences(spec, store)
    ]
    return report


def _walk(store: Store, rel: str) -> Iterator[Entry]:
    for entry in store.walk(rel):
        if entry.path != rel:
            yield entry
