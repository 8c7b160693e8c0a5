"""Writer profiles: how each checkpoint writer names a unit and says it is whole.

Profiles are declared in the layout file (`[writers.NAME]`), not hard-coded, so a site can add the
writer its own training code uses. A profile is data only; `scan.py` applies it.

Vocabulary of a profile (every key but `unit` and `complete` optional):
  unit         regex for a unit's directory name beside its siblings; a named group `step` holds the step
  complete     list of alternatives; each is a list of globs (relative to the unit) that must all exist
  commit_file  a file also required on tiers without atomic rename (the writer cannot rename there)
  tracker      { file = NAME, holds = "step" | "unit" }: a file beside the units naming the newest one
  unfinished   a sibling marker name (`{unit}` is the unit's name) whose presence means unfinished
  unfinished_strip  suffixes taken off a unit's name, in order, before it fills `{unit}` (NeMo:
               `x.ckpt` and `x-EMA.ckpt` are both unfinished while `x-unfinished` exists)
  temp         globs of the writer's in-progress names (beside units, or inside one)
  signature    globs whose presence says "this writer wrote here" even when no alternative is met
  beside       globs of other entries the writer leaves beside units (scripts, logs, exports)
  unit_files   true when a unit may be a single file (NeMo 1 `.ckpt` files)
  keeps        { file = NAME, key = KEY }: in the writer's newest complete unit, the JSON file NAME's
               KEY names a unit the writer's own rotation never deletes (HF's best_model_checkpoint)
  count        a completeness check that counts rank files against what the unit records
               ("deepspeed": ZeRO shards against dp_world_size; "dcp-ranks": __R.metadata per rank)
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any

from storekit.errors import ConfigError
from storekit.tomlkeys import get_bool, get_regex, get_str, named_table, reject_unknown

_NAME_RE = re.compile(r"^[a-z][a-z0-9-]*$")
_NAME_RULE = "writer names are lowercase letters, digits and '-'"
_KEYS = {
    "description",
    "unit",
    "complete",
    "commit_file",
    "tracker",
    "unfinished",
    "temp",
    "signature",
    "beside",
    "unit_files",
    "count",
    "unfinished_strip",
    "keeps",
}
COUNT_NAMES = ("deepspeed", "dcp-ranks")  # implemented in counts.py


@dataclass(frozen=True, kw_only=True)
class Tracker:
    file: str
    holds: str  # "step": the file holds the step number; "unit": it holds the unit's name


@dataclass(frozen=True, kw_only=True)
class Keeps:
    file: str  # a JSON file inside the writer's newest complete unit
    key: str  # its top-level key whose value is the path (or name) of a unit to keep


@dataclass(frozen=True, kw_only=True)
class WriterProfile:
    name: str
    description: str
    unit: re.Pattern[str]
    complete: tuple[tuple[str, ...], ...]
    commit_file: str | None = None
    tracker: Tracker | None = None
    unfinished: str | None = None
    temp: tuple[str, ...] = ()
    signature: tuple[str, ...] = ()
    beside: tuple[str, ...] = ()
    unit_files: bool = False
    count: str | None = None
    unfinished_strip: tuple[str, ...] = ()
    keeps: Keeps | None = None

    def matches_unit(self, name: str) -> bool:
        return self.unit.fullmatch(name) is not None

    def step_of(self, name: str) -> int | None:
        m = self.unit.fullmatch(name)
        if m is None or "step" not in m.groupdict() or m.group("step") is None:
            return None
        return int(m.group("step"))

    def is_temp(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in self.temp)

    def is_beside(self, name: str) -> bool:
        if self.tracker is not None and name == self.tracker.file:
            return True
        return any(fnmatch.fnmatchcase(name, p) for p in self.beside)

    def marker_key(self, unit_name: str) -> str:
        """What `{unit}` stands for in this unit's unfinished marker."""
        for suffix in self.unfinished_strip:
            unit_name = unit_name.removesuffix(suffix)
        return unit_name

    def marker_for(self, unit_name: str) -> str | None:
        return self.unfinished.replace("{unit}", self.marker_key(unit_name)) if self.unfinished else None

    def is_marker(self, name: str) -> str | None:
        """The unit a sibling `name` marks unfinished, if `name` is this writer's marker."""
        if not self.unfinished:
            return None
        head, _, tail = self.unfinished.partition("{unit}")
        if name.startswith(head) and name.endswith(tail) and len(name) > len(head) + len(tail):
            return name[len(head) : len(name) - len(tail)]
        return None

    def describe_complete(self) -> str:
        return " or ".join(" + ".join(alt) for alt in self.complete)


def parse_profiles(raw: Any, source: str) -> tuple[WriterProfile, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise ConfigError(source, "writers", "expected tables [writers.NAME]")
    return tuple(_parse_profile(name, body, source) for name, body in raw.items())


def _parse_profile(name: str, body: Any, source: str) -> WriterProfile:
    key, body = named_table("writers", name, body, source, _KEYS, _NAME_RE, _NAME_RULE)
    unit = get_regex(body, "unit", source, f"{key}.unit")
    complete = body.get("complete")
    if (
        not isinstance(complete, list)
        or not complete
        or not all(isinstance(alt, list) and alt and all(_glob(g) for g in alt) for alt in complete)
    ):
        raise ConfigError(
            source,
            f"{key}.complete",
            'expected a list of glob lists, e.g. [[".metadata"]] or [["a", "b"], ["c"]]',
        )
    tracker = _parse_tracker(body.get("tracker"), source, f"{key}.tracker")
    unfinished = body.get("unfinished")
    if unfinished is not None and (not isinstance(unfinished, str) or "{unit}" not in unfinished):
        raise ConfigError(source, f"{key}.unfinished", 'expected a name containing "{unit}"')
    commit_file = body.get("commit_file")
    if commit_file is not None and not _glob(commit_file):
        raise ConfigError(source, f"{key}.commit_file", "expected a file name")
    unit_files = get_bool(body, "unit_files", source, f"{key}.unit_files", False)
    count = body.get("count")
    if count is not None and count not in COUNT_NAMES:
        raise ConfigError(source, f"{key}.count", f"expected one of {', '.join(COUNT_NAMES)}")
    return WriterProfile(
        name=name,
        description=get_str(body, "description", source, f"{key}.description", default=""),
        unit=unit,
        complete=tuple(tuple(alt) for alt in complete),
        commit_file=commit_file,
        tracker=tracker,
        unfinished=unfinished,
        temp=_globs(body, "temp", source, key),
        signature=_globs(body, "signature", source, key),
        beside=_globs(body, "beside", source, key),
        unit_files=unit_files,
        count=count,
        unfinished_strip=_strings(body, "unfinished_strip", source, key),
        keeps=_parse_keeps(body.get("keeps"), source, f"{key}.keeps"),
    )


def _parse_tracker(raw: Any, source: str, key: str) -> Tracker | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(source, key, 'expected { file = "NAME", holds = "step" | "unit" }')
    reject_unknown(raw, {"file", "holds"}, source, key)
    file = get_str(raw, "file", source, f"{key}.file")
    holds = get_str(raw, "holds", source, f"{key}.holds")
    if holds not in ("step", "unit") or "/" in file or not file:
        raise ConfigError(source, key, 'expected { file = "NAME", holds = "step" | "unit" }')
    return Tracker(file=file, holds=holds)


def _parse_keeps(raw: Any, source: str, key: str) -> Keeps | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(source, key, 'expected { file = "NAME", key = "KEY" }')
    reject_unknown(raw, {"file", "key"}, source, key)
    file, name = get_str(raw, "file", source, f"{key}.file"), get_str(raw, "key", source, f"{key}.key")
    if not _glob(file) or not name:
        raise ConfigError(source, key, 'expected { file = "NAME", key = "KEY" }')
    return Keeps(file=file, key=name)


def _glob(value: Any) -> bool:
    return (
        isinstance(value, str) and bool(value) and not value.startswith("/") and ".." not in value.split("/")
    )


def _strings(body: dict[str, Any], name: str, source: str, key: str) -> tuple[str, ...]:
    value = body.get(name, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v and "/" not in v for v in value):
        raise ConfigError(source, f"{key}.{name}", "expected a list of name suffixes")
    return tuple(value)


def _globs(body: dict[str, Any], name: str, source: str, key: str) -> tuple[str, ...]:
    value = body.get(name, [])
    if not isinstance(value, list) or not all(_glob(v) for v in value):
        raise ConfigError(source, f"{key}.{name}", "expected a list of relative glob patterns")
    return tuple(value)
