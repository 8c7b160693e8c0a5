"""LayoutSpec: a `layouts/*.toml` file parsed into a frozen, validated object.

Validation is eager; every error names the file, the key and what was expected. Names in a layout
are single path components, so no spec can point outside the tier root.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import Any

from storekit.errors import ConfigError
from storekit.policies import Policy, parse_policies
from storekit.readers import Invalid, read_duration, read_int, read_size
from storekit.resources import resolve_declarative
from storekit.tomlkeys import (
    get_bool,
    get_read,
    get_regex,
    get_str,
    get_table,
    named_table,
    parse_toml,
    reject_unknown,
)
from storekit.writerprofiles import WriterProfile, parse_profiles

_AREA_RE = re.compile(r"^[a-z][a-z0-9_-]*$")
_AREA_RULE = "area names are one path component: lowercase letters, digits, '-', '_'"
_AREA_KEYS = {
    "description",
    "mode",
    "read_only",
    "create",
    "levels",
    "ttl",
    "quota",
    "quota_files",
    "striping",
    "writers",
    "quiet_period",
    "beside",
}
_COMPONENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]*$")
_MODE_RE = re.compile(r"^[0-7]{3,4}$")


@dataclass(frozen=True, kw_only=True)
class LevelSpec:
    name: str
    pattern: re.Pattern[str]
    committed_by: str | None = None

    def matches(self, entry_name: str) -> bool:
        return self.pattern.fullmatch(entry_name) is not None


@dataclass(frozen=True, kw_only=True)
class StripingSpec:
    count: int  # -1 = all OSTs
    size: int  # bytes


@dataclass(frozen=True, kw_only=True)
class AreaSpec:
    name: str
    description: str
    mode: int
    read_only: bool = False
    create: tuple[str, ...] = ()
    levels: tuple[LevelSpec, ...] = ()
    ttl_seconds: float | None = None
    quota_bytes: int | None = None
    quota_files: int | None = None
    striping: StripingSpec | None = None
    writers: tuple[WriterProfile, ...] = ()  # checkpoint writers whose units sit below the last level
    quiet_seconds: float = 600.0  # a unit changed more recently than this is "in progress"
    beside: tuple[str, ...] = ()  # names allowed beside units whatever the writer (archive stubs)


@dataclass(frozen=True, kw_only=True)
class LayoutSpec:
    name: str
    source: str
    description: str
    root_mode: int
    temp_patterns: tuple[str, ...]
    areas: tuple[AreaSpec, ...]
    policies: dict[str, Policy] = field(default_factory=dict)  # [policies.NAME]: the layout's tier rules

    def area(self, name: str) -> AreaSpec | None:
        return next((a for a in self.areas if a.name == name), None)

    def is_temp_name(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in self.temp_patterns)


def load_layout(name_or_path: str) -> LayoutSpec:
    path = resolve_declarative("layouts", name_or_path)
    return parse_layout(path.read_bytes(), source=str(path))


def parse_layout(data: bytes, *, source: str) -> LayoutSpec:
    raw = parse_toml(data, source)
    reject_unknown(raw, {"layout", "areas", "writers", "policies"}, source, "")
    head = get_table(raw, "layout", source, "layout")
    reject_unknown(head, {"name", "description", "root_mode", "temp_patterns"}, source, "layout")
    areas_raw = get_table(raw, "areas", source, "areas")
    if not areas_raw:
        raise ConfigError(source, "areas", "expected at least one area, e.g. [areas.datasets]")
    profiles = {p.name: p for p in parse_profiles(raw.get("writers"), source)}
    areas = tuple(_parse_area(name, body, source, profiles) for name, body in areas_raw.items())
    patterns = head.get("temp_patterns", ["*.storekit-tmp-*"])
    if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
        raise ConfigError(source, "layout.temp_patterns", "expected a list of glob patterns")
    return LayoutSpec(
        name=get_str(head, "name", source, "layout.name"),
        source=source,
        description=get_str(head, "description", source, "layout.description", default=""),
        root_mode=_mode(head.get("root_mode", "0755"), source, "layout.root_mode"),
        temp_patterns=tuple(patterns),
        areas=areas,
        policies=_area_policies(parse_policies(raw.get("policies"), source), areas, source),
    )


def _area_policies(
    policies: dict[str, Policy], areas: tuple[AreaSpec, ...], source: str
) -> dict[str, Policy]:
    names = {a.name for a in areas}
    for p in policies.values():
        if p.area not in names:
            raise ConfigError(
                source, p.key("area"), f"names no area of this layout ({', '.join(sorted(names))})"
            )
    return policies


def _parse_area(name: str, body: Any, source: str, profiles: dict[str, WriterProfile]) -> AreaSpec:
    key, body = named_table("areas", name, body, source, _AREA_KEYS, _AREA_RE, _AREA_RULE)
    levels = tuple(
        _parse_level(i, lv, source, f"{key}.levels[{i}]") for i, lv in enumerate(body.get("levels", []))
    )
    create = body.get("create", [])
    if not isinstance(create, list) or not all(isinstance(c, str) for c in create):
        raise ConfigError(source, f"{key}.create", "expected a list of directory names")
    for i, c in enumerate(create):
        _component(c, source, f"{key}.create[{i}]")
        if levels and not levels[0].matches(c):
            raise ConfigError(
                source,
                f"{key}.create[{i}]",
                f"{c!r} does not match the first level's pattern {levels[0].pattern.pattern!r}",
            )
    read_only = get_bool(body, "read_only", source, f"{key}.read_only", False)
    return AreaSpec(
        name=name,
        description=get_str(body, "description", source, f"{key}.description", default=""),
        mode=_mode(body.get("mode", "0755"), source, f"{key}.mode"),
        read_only=read_only,
        create=tuple(create),
        levels=levels,
        ttl_seconds=get_read(body, "ttl", read_duration, source, key),
        quota_bytes=get_read(body, "quota", read_size, source, key),
        quota_files=get_read(body, "quota_files", _positive_int, source, key),
        striping=_parse_striping(body.get("striping"), source, f"{key}.striping"),
        writers=_area_writers(body.get("writers", []), profiles, source, f"{key}.writers"),
        quiet_seconds=get_read(body, "quiet_period", read_duration, source, key) or 600.0,
        beside=_name_globs(body.get("beside", []), source, f"{key}.beside"),
    )


def _area_writers(
    names: Any, profiles: dict[str, WriterProfile], source: str, key: str
) -> tuple[WriterProfile, ...]:
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError(source, key, 'expected a list of writer names, e.g. ["storekit", "torch-dcp"]')
    for n in names:
        if n not in profiles:
            known = ", ".join(sorted(profiles)) or "none"
            raise ConfigError(source, key, f"no [writers.{n}] in this layout (declared: {known})")
    return tuple(profiles[n] for n in names)


def _name_globs(value: Any, source: str, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v and "/" not in v for v in value):
        raise ConfigError(source, key, 'expected a list of name globs such as "*.stub"')
    return tuple(value)


def _parse_level(i: int, raw: Any, source: str, key: str) -> LevelSpec:
    if not isinstance(raw, dict):
        raise ConfigError(source, key, "expected an inline table { name = ..., pattern = ... }")
    reject_unknown(raw, {"name", "pattern", "committed_by"}, source, key)
    pattern = get_regex(raw, "pattern", source, f"{key}.pattern")
    committed_by = raw.get("committed_by")
    if committed_by is not None:
        committed_by = _component(committed_by, source, f"{key}.committed_by")
    return LevelSpec(
        name=get_str(raw, "name", source, f"{key}.name"), pattern=pattern, committed_by=committed_by
    )


def _parse_striping(raw: Any, source: str, key: str) -> StripingSpec | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(source, key, 'expected { count = N, size = "4MiB" }')
    reject_unknown(raw, {"count", "size"}, source, key)
    count = raw.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count == 0 or count < -1:
        raise ConfigError(source, f"{key}.count", "expected a positive integer or -1 (all OSTs)")
    try:
        size = read_size(raw.get("size", "1MiB"))
    except Invalid as exc:
        raise ConfigError(source, f"{key}.size", str(exc)) from None
    if size < 65536 or size % 65536:
        raise ConfigError(source, f"{key}.size", "Lustre stripe sizes are multiples of 64KiB")
    return StripingSpec(count=count, size=size)


def _positive_int(value: Any) -> int:
    return read_int(value, low=1)


def _component(value: Any, source: str, key: str) -> str:
    if not isinstance(value, str) or value in (".", "..") or "/" in value or not _COMPONENT_RE.match(value):
        raise ConfigError(
            source, key, f"{value!r} is not a single path component (no '/', '..' or absolute paths)"
        )
    return value


def _mode(value: Any, source: str, key: str) -> int:
    if not isinstance(value, str) or not _MODE_RE.match(value):
        raise ConfigError(
            source, key, f'expected an octal mode string such as "0755" or "1777", got {value!r}'
        )
    return int(value, 8)
