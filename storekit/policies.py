"""Tier policies: declarative rules (`[policies.NAME]` in storekit.toml or a layout) parsed and checked.

A policy names one action on one area and the conditions a unit must meet to be selected. Parsing is
structural and eager (`parse_policies`, called where the file is loaded); `resolve_policy` then checks
it against the site's tiers (a watermark needs a tier that knows its free space, which S3 does not).
Selecting units is `storekit.tier.select`; this module is data and validation only, and sits with the
foundation modules: the site config and layouts parse policies with it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from storekit.errors import ConfigError
from storekit.readers import read_duration, read_int, read_percent, read_size
from storekit.tomlkeys import get_bool, get_choice, get_read, get_str, named_table


class SiteTiers(Protocol):
    """What resolving a policy needs of the site config (storekit.config.SiteConfig), which
    imports this module to parse its [policies]."""

    @property
    def tiers(self) -> Mapping[str, Any]: ...

    @property
    def source(self) -> str: ...


ACTIONS = ("drain", "archive", "recall", "purge")
# where each action moves units when the policy names no tier: by the tiers' roles
DEFAULT_FROM_ROLE = {"drain": "burst", "archive": "parallel", "purge": "parallel", "recall": "archive"}
DEFAULT_TO_ROLE = {"drain": "parallel", "archive": "archive", "purge": "archive", "recall": "parallel"}
PER_STUB = "(each stub's tier)"
ADHOC = "command line"  # the source of a policy made from --archive PATH / --drain / --recall PATH
_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]*$")
_NAME_RULE = "policy names use lowercase letters, digits, '-', '_'"
_KEYS = {
    "description",
    "action",
    "area",
    "from",
    "to",
    "paths",
    "pinned",
    "older_than",
    "larger_than",
    "smaller_than",
    "idle_for",
    "keep_last",
    "keep_every",
    "high_watermark",
    "low_watermark",
    "free_source",
    "verify_max_age",
}
_CHECKPOINT_ONLY = ("idle_for", "keep_last", "keep_every")
_NOT_FOR_RECALL = ("older_than", "idle_for", "keep_last", "keep_every", "high_watermark", "pinned")


@dataclass(frozen=True, kw_only=True)
class Policy:
    name: str
    source: str  # the file it came from (or "command line")
    description: str = ""
    action: str
    area: str = "checkpoints"
    from_tier: str | None = None  # None: the tier with DEFAULT_FROM_ROLE[action]
    to_tier: str | None = None
    paths: tuple[str, ...] = ()  # globs (tier-relative) limiting the scope; empty: the whole area
    pinned: tuple[str, ...] = ()  # globs of units that may be copied but never freed
    older_than_s: float | None = None
    larger_than: int | None = None
    smaller_than: int | None = None
    idle_for_s: float | None = None  # run state: no new checkpoint in the run for this long
    keep_last: int = 0  # the N newest complete checkpoints of each run stay
    keep_every: int | None = None  # and those whose step is a multiple of K
    high_watermark: float | None = None  # fraction used at which the rule starts
    low_watermark: float | None = None  # fraction used it selects down to
    free_source: bool = True  # archive/drain: free the source once its copy is verified + committed
    verify_max_age_s: float | None = None  # purge: a verification this recent suffices; else read back

    def key(self, name: str) -> str:
        return f"policies.{self.name}.{name}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "action": self.action,
            "area": self.area,
            "from": self.from_tier,
            "to": self.to_tier,
            "paths": list(self.paths),
            "pinned": list(self.pinned),
            "older_than_s": self.older_than_s,
            "larger_than": self.larger_than,
            "smaller_than": self.smaller_than,
            "idle_for_s": self.idle_for_s,
            "keep_last": self.keep_last,
            "keep_every": self.keep_every,
            "high_watermark": self.high_watermark,
            "low_watermark": self.low_watermark,
            "free_source": self.free_source,
            "verify_max_age_s": self.verify_max_age_s,
        }


def parse_policies(raw: Any, source: str) -> dict[str, Policy]:
    """`[policies.NAME]` tables as Policies; errors name the file and the key."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(source, "policies", "expected tables such as [policies.old-runs]")
    return {name: parse_policy(name, body, source) for name, body in raw.items()}


def parse_policy(name: str, body: Any, source: str) -> Policy:
    key, body = named_table(
        "policies", name, body, source, _KEYS, _NAME_RE, _NAME_RULE, " with at least `action`"
    )
    action = get_choice(body, "action", source, f"{key}.action", ACTIONS)
    policy = Policy(
        name=name,
        source=source,
        description=get_str(body, "description", source, f"{key}.description", default=""),
        action=action,
        area=_component(body, "area", source, key, "checkpoints"),
        from_tier=_opt_str(body, "from", source, key),
        to_tier=_opt_str(body, "to", source, key),
        paths=_globs(body, "paths", source, key),
        pinned=_globs(body, "pinned", source, key),
        older_than_s=get_read(body, "older_than", read_duration, source, key),
        larger_than=get_read(body, "larger_than", read_size, source, key),
        smaller_than=get_read(body, "smaller_than", read_size, source, key),
        idle_for_s=get_read(body, "idle_for", read_duration, source, key),
        keep_last=get_read(body, "keep_last", _at_least(0), source, key) or 0,
        keep_every=get_read(body, "keep_every", _at_least(1), source, key),
        high_watermark=get_read(body, "high_watermark", read_percent, source, key),
        low_watermark=get_read(body, "low_watermark", read_percent, source, key),
        free_source=get_bool(body, "free_source", source, f"{key}.free_source", True),
        verify_max_age_s=get_read(body, "verify_max_age", read_duration, source, key),
    )
    check_conditions(policy)
    return policy


def check_conditions(p: Policy) -> None:
    """Conditions no unit could ever meet, or that contradict the action, are errors, not empty plans."""
    src = p.source
    if p.larger_than is not None and p.smaller_than is not None and p.larger_than >= p.smaller_than:
        raise ConfigError(src, p.key("smaller_than"), "must be larger than larger_than: no unit could match")
    if (p.high_watermark is None) != (p.low_watermark is None):
        missing = "low_watermark" if p.low_watermark is None else "high_watermark"
        raise ConfigError(src, p.key(missing), "watermarks come in pairs: set both or neither")
    if p.high_watermark is not None and p.low_watermark is not None and p.low_watermark >= p.high_watermark:
        raise ConfigError(src, p.key("low_watermark"), "must be below high_watermark")
    if p.from_tier is not None and p.from_tier == p.to_tier:
        raise ConfigError(src, p.key("to"), f"is the same tier as `from` ({p.from_tier})")
    if p.verify_max_age_s is not None and p.action != "purge":
        raise ConfigError(src, p.key("verify_max_age"), 'applies to action = "purge" only')
    if p.action == "recall":
        for name in _NOT_FOR_RECALL:
            if _is_set(p, name):
                raise ConfigError(src, p.key(name), "is not a condition a recall can use (it restores stubs)")
    if p.action in ("recall", "purge") and not p.free_source:
        raise ConfigError(src, p.key("free_source"), f"means nothing for {p.action}")
    if p.area == "datasets":
        for name in _CHECKPOINT_ONLY:
            if _is_set(p, name):
                raise ConfigError(src, p.key(name), "applies to checkpoint areas only (runs and steps)")


def _is_set(p: Policy, name: str) -> bool:
    attr = {"older_than": "older_than_s", "idle_for": "idle_for_s"}.get(name, name)
    value = getattr(p, attr)
    return (
        bool(value) if isinstance(value, tuple | int) and not isinstance(value, bool) else value is not None
    )


@dataclass(frozen=True, kw_only=True)
class ResolvedPolicy:
    policy: Policy
    from_tier: str
    to_tier: str


def resolve_policy(p: Policy, site: SiteTiers, *, scan_tier: str | None = None) -> ResolvedPolicy:
    """Name the tiers (explicit, or by role) and check what needs the tiers to be known.

    `scan_tier` (`--tier`) overrides the tier units are selected on: the source, or for a recall the
    tier holding the stubs (each stub names the tier its unit went to).
    """
    if p.action == "recall":
        dst = scan_tier or p.to_tier or _by_role(site, DEFAULT_TO_ROLE["recall"], p, "to")
        _known(site, p, "to", dst)
        return ResolvedPolicy(policy=p, from_tier=PER_STUB, to_tier=dst)
    src = scan_tier or p.from_tier or _by_role(site, DEFAULT_FROM_ROLE[p.action], p, "from")
    dst = p.to_tier or _by_role(site, DEFAULT_TO_ROLE[p.action], p, "to")
    _known(site, p, "from", src)
    _known(site, p, "to", dst)
    if src == dst:
        raise ConfigError(p.source, p.key("to"), f"moves units from tier {src} to itself")
    if p.high_watermark is not None and site.tiers[src].scheme == "s3":
        raise ConfigError(
            p.source,
            p.key("high_watermark"),
            f"tier {src} is S3, which does not report free space: watermarks cannot apply there",
            hint="use older_than / idle_for / keep_last conditions for S3 tiers",
        )
    return ResolvedPolicy(policy=p, from_tier=src, to_tier=dst)


def _known(site: SiteTiers, p: Policy, key: str, name: str) -> None:
    if name not in site.tiers:
        known = ", ".join(sorted(site.tiers))
        raise ConfigError(p.source, p.key(key), f"names unknown tier {name!r} (known: {known})")


def _by_role(site: SiteTiers, role: str, p: Policy, key: str) -> str:
    named: list[str] = [t.name for t in site.tiers.values() if t.role == role]
    if len(named) == 1:
        return named[0]
    why = "no tier has" if not named else f"{len(named)} tiers have ({', '.join(named)})"
    raise ConfigError(
        p.source,
        p.key(key),
        f"not set, and {why} role {role!r} in {site.source}",
        hint=f'name the tier: {key} = "TIER", or give one tier role = "{role}"',
    )


def adhoc_policy(action: str, *, paths: tuple[str, ...] = (), area: str = "checkpoints") -> Policy:
    """What `--archive PATH` / `--drain` / `--recall PATH` mean without a named policy."""
    name = f"{action}-path" if paths else action
    return Policy(name=name, source=ADHOC, action=action, area=area, paths=paths)


def merged_policies(
    site_policies: Mapping[str, Policy], layout_policies: Mapping[str, Policy]
) -> dict[str, Policy]:
    """A site's policy replaces the layout's of the same name: the site file is the local decision."""
    return {**layout_policies, **site_policies}


def _opt_str(body: Mapping[str, Any], name: str, source: str, key: str) -> str | None:
    return get_str(body, name, source, f"{key}.{name}") if name in body else None


def _component(body: Mapping[str, Any], name: str, source: str, key: str, default: str) -> str:
    value = get_str(body, name, source, f"{key}.{name}", default=default)
    if not _NAME_RE.match(value):
        raise ConfigError(source, f"{key}.{name}", f"{value!r} is not an area name")
    return value


def _globs(body: Mapping[str, Any], name: str, source: str, key: str) -> tuple[str, ...]:
    value = body.get(name, [])
    ok = isinstance(value, list) and all(isinstance(v, str) and v and not v.startswith("/") for v in value)
    if not ok or any(".." in v.split("/") for v in value):
        raise ConfigError(
            source, f"{key}.{name}", 'expected a list of tier-relative globs ("checkpoints/run_0*")'
        )
    return tuple(v.strip("/") for v in value)


def _at_least(low: int) -> Callable[[Any], int]:
    return lambda value: read_int(value, low=low)
