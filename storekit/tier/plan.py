"""Tier plans: what a policy would move, with a fingerprint per unit, as a file a person can review.

`build_plan` is the plan step of spec → plan → apply: it reads the tiers and writes nothing.
`render_plan` gives the file `--plan-out` writes (JSON with a keyed digest over everything else), and
`load_plan` is the only way `--apply` reads one back: a plan edited by hand (digest), made for other
tiers, made on another node for a node-local tier, or older than its maximum age is refused.
"""

from __future__ import annotations

import getpass
import json
import socket
import time
from dataclasses import dataclass, field, replace
from typing import Any

from storekit.config import SiteConfig, mask_url
from storekit.diskspace import usage
from storekit.errors import ConfigError, MismatchError, NotFoundError, StorekitError
from storekit.layout.spec import load_layout
from storekit.policies import ADHOC, Policy, ResolvedPolicy, resolve_policy
from storekit.store import Store, open_store
from storekit.stubs import is_stub_name, stub_rel
from storekit.tier.candidates import area_of, discover
from storekit.tier.fingerprint import FileStat, Fingerprint, fingerprint_of
from storekit.tier.plankey import keyed_digest, plan_key, same_digest
from storekit.tier.relpath import bad_rel
from storekit.tier.select import Choice, Usage, select

__all__ = ["FileStat", "Fingerprint", "PlanUnit", "TierPlan", "build_plan", "fingerprint_of"]

PLAN_KIND = "storekit-tier-plan"
ACTIONS = ("drain", "archive", "recall", "purge")
PLAN_SCHEMA = 1
DEFAULT_MAX_AGE_S = 24 * 3600.0  # a plan older than this describes a tree that has moved on


class PlanError(StorekitError):
    """A plan file that will not be applied: stale, for other tiers, or made on another node."""


@dataclass(frozen=True, kw_only=True)
class PlanUnit:
    action: str  # drain | archive | recall | purge
    unit_kind: str  # checkpoint | dataset
    src_tier: str
    src_path: str  # tier-relative
    dst_tier: str
    dst_path: str
    bytes: int
    files: int
    fingerprint: str  # xxh3-128 of the unit's stats (for recall: of its stub's)
    free_source: bool
    reason: str
    keep_reason: str | None = None
    verify_max_age_s: float | None = None
    writer: str | None = None
    step: int | None = None
    is_file: bool = False
    stub_manifest_xxh3: str | None = None  # recall: the archive manifest the stub names
    stats: Fingerprint | None = field(default=None, compare=False)  # in memory only, for the mover

    def to_dict(self) -> dict[str, Any]:
        doc = {k: v for k, v in self.__dict__.items() if k != "stats"}
        return doc

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> PlanUnit:
        return cls(**doc)


@dataclass(frozen=True, kw_only=True)
class TierPlan:
    action: str
    policy: dict[str, Any]
    created: float
    host: str
    user: str
    tiers: dict[str, str]  # tier name -> URL (masked) it had when planned
    node_local: tuple[str, ...]  # tiers of role burst: the plan holds only on `host`
    units: tuple[PlanUnit, ...]
    passed: tuple[dict[str, object], ...] = ()
    note: str | None = None
    max_age_s: float = DEFAULT_MAX_AGE_S

    def body(self) -> dict[str, Any]:
        return {
            "schema_version": PLAN_SCHEMA,
            "kind": PLAN_KIND,
            "action": self.action,
            "policy": self.policy,
            "created": self.created,
            "created_iso": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.created)),
            "host": self.host,
            "user": self.user,
            "tiers": self.tiers,
            "node_local": list(self.node_local),
            "max_age_s": self.max_age_s,
            "note": self.note,
            "totals": self.totals(),
            "units": [u.to_dict() for u in self.units],
            "passed": list(self.passed),
        }

    def totals(self) -> dict[str, int]:
        freed = [u for u in self.units if u.free_source]
        return {
            "units": len(self.units),
            "bytes": sum(u.bytes for u in self.units),
            "files": sum(u.files for u in self.units),
            "units_freed": len(freed),
            "bytes_freed": sum(u.bytes for u in freed),
        }

    def to_dict(self) -> dict[str, Any]:
        """The plan as shown (--json); the file `render_plan` writes adds its keyed digest."""
        return self.body()


def body_digest(body: dict[str, Any], key: bytes) -> str:
    """HMAC-SHA256 of the canonical body with the site's plan key (storekit.tier.plankey)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return keyed_digest(key, canonical.encode("ascii"))


def render_plan(plan: TierPlan, site: SiteConfig) -> bytes:
    body = plan.body()
    doc = {**body, "digest": body_digest(body, plan_key(site, create=True))}
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode("utf-8")


@dataclass(frozen=True)
class PlanRequest:
    policy: Policy
    tier: str | None = None  # --tier: the tier to select on (recall: the tier of the stubs)


def build_plan(site: SiteConfig, request: PlanRequest, *, now: float | None = None) -> TierPlan:
    """Read the tiers and say what the policy would do now; writes nothing anywhere."""
    now = time.time() if now is None else now
    resolved = resolve_policy(request.policy, site, scan_tier=request.tier)
    p = resolved.policy
    scan_tier = resolved.to_tier if p.action == "recall" else resolved.from_tier
    store = open_store(site.tier(scan_tier))
    store.probe()
    spec = load_layout(store.tier.layout)
    area = area_of(spec, p.area)
    named_note = _check_named(store, p) if p.source == ADHOC else None
    units = discover(store, spec, area, scope=p.paths, now=now)
    selection = select(p, units, now=now, usage=_usage(store) if p.high_watermark is not None else None)
    plan_units = tuple(_plan_unit(store, resolved, c) for c in selection.chosen)
    return TierPlan(
        action=p.action,
        policy={**p.to_dict(), "from": resolved.from_tier, "to": resolved.to_tier},
        created=now,
        host=socket.gethostname(),
        user=getpass.getuser(),
        tiers={name: mask_url(t.url) for name, t in site.tiers.items()},
        node_local=tuple(sorted(name for name, t in site.tiers.items() if t.role == "burst")),
        units=plan_units,
        passed=tuple(x.to_dict() for x in selection.passed),
        note=named_note or selection.note,
    )


def _check_named(store: Store, p: Policy) -> str | None:
    """A path named on the command line must exist (a recall's unit: as a stub, or already back:
    then the plan is empty and its note says so)."""
    here: list[str] = []
    for path in p.paths:
        if p.action != "recall":
            if not store.exists(path):
                raise NotFoundError(f"{store.name}:{path}: no such unit, run or area on this tier")
        elif not store.exists(stub_rel(path)) and not (store.exists(path) and _has_stubs(store, path)):
            if store.exists(path):  # recalled already (a rerun): nothing to do, not an error
                here.append(path)
                continue
            raise NotFoundError(f"{store.name}:{path}: no stub here or below it (nothing archived to recall)")
    return f"already here, no stub: {', '.join(here)} (nothing to recall)" if here else None


def _has_stubs(store: Store, path: str) -> bool:
    return any(is_stub_name(e.name) for e in store.walk(path))


def _usage(store: Store) -> Usage | None:
    """Used and total bytes of a POSIX tier (statvfs); None where the tier does not say (S3)."""
    local = store.local_path("")
    if local is None:
        return None
    known = usage(local)
    if known is None:
        return None
    free, total = known
    return Usage(used=total - free, total=total)


def _plan_unit(store: Store, resolved: ResolvedPolicy, choice: Choice) -> PlanUnit:
    c, p = choice.unit, resolved.policy
    if p.action == "recall":
        assert c.stub is not None
        stamp = fingerprint_of(store, stub_rel(c.path))
        return PlanUnit(
            action="recall",
            unit_kind=c.unit_kind,
            src_tier=c.stub.to_tier,
            src_path=c.stub.to_path,
            dst_tier=store.tier.name,
            dst_path=c.path,
            bytes=c.stub.bytes,
            files=c.stub.files,
            fingerprint=stamp.digest,
            free_source=False,
            reason=choice.reason,
            writer=c.writer,
            step=c.step,
            is_file=c.is_file,
            stub_manifest_xxh3=c.stub.manifest_xxh3,
            stats=stamp,
        )
    stamp = fingerprint_of(store, c.path)
    reason = choice.reason
    if p.action == "purge":
        how = "read back right before" if p.verify_max_age_s is None else "verified within verify_max_age"
        reason += f"; freed only if its copy on {resolved.to_tier} is verified ({how})"
    return PlanUnit(
        action=p.action,
        unit_kind=c.unit_kind,
        src_tier=resolved.from_tier,
        src_path=c.path,
        dst_tier=resolved.to_tier,
        dst_path=c.path,
        bytes=stamp.bytes,
        files=stamp.file_count,
        fingerprint=stamp.digest,
        free_source=choice.free_source,
        reason=reason,
        keep_reason=choice.keep_reason,
        verify_max_age_s=p.verify_max_age_s,
        writer=c.writer,
        step=c.step,
        is_file=c.is_file,
        stats=stamp,
    )


def load_plan(data: bytes, source: str, site: SiteConfig, *, now: float | None = None) -> TierPlan:
    """A plan file as written by `--plan-out`, checked before anything is applied (one-line errors)."""
    now = time.time() if now is None else now
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(source, None, f"not a storekit plan (not JSON: {exc})") from None
    if not isinstance(doc, dict) or doc.get("kind") != PLAN_KIND:
        raise ConfigError(source, "kind", f"not a storekit plan (expected kind {PLAN_KIND!r})")
    if doc.get("schema_version") != PLAN_SCHEMA:
        raise ConfigError(
            source, "schema_version", f"expected {PLAN_SCHEMA}, got {doc.get('schema_version')!r}"
        )
    digest = doc.pop("digest", None)
    if not same_digest(body_digest(doc, plan_key(site, create=False)), digest):
        raise MismatchError(
            f"{source}: the plan was changed after it was made (digest mismatch); it is not applied",
            hint="make a new plan with --plan-out; edit the policy, not the plan",
        )
    plan = _from_doc(doc, source)
    _check_units(plan, source)
    _check_fresh(plan, source, site, now)
    return plan


def _check_units(plan: TierPlan, source: str) -> None:
    """Every unit a known action on paths that stay inside their tiers (also checked by the mover)."""
    for i, unit in enumerate(plan.units):
        if unit.action not in ACTIONS:
            raise ConfigError(
                source, f"units[{i}].action", f"unknown action {unit.action!r} ({', '.join(ACTIONS)})"
            )
        for key in ("src_path", "dst_path"):
            why = bad_rel(getattr(unit, key))
            if why is not None:
                raise ConfigError(source, f"units[{i}].{key}", f"{getattr(unit, key)!r}: {why}; not applied")


def _from_doc(doc: dict[str, Any], source: str) -> TierPlan:
    try:
        return TierPlan(
            action=doc["action"],
            policy=doc["policy"],
            created=float(doc["created"]),
            host=doc["host"],
            user=doc["user"],
            tiers=dict(doc["tiers"]),
            node_local=tuple(doc["node_local"]),
            units=tuple(PlanUnit.from_dict(u) for u in doc["units"]),
            passed=tuple(doc["passed"]),
            note=doc.get("note"),
            max_age_s=float(doc["max_age_s"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(source, None, f"not a storekit plan ({type(exc).__name__}: {exc})") from None


def _check_fresh(plan: TierPlan, source: str, site: SiteConfig, now: float) -> None:
    age = now - plan.created
    if age > plan.max_age_s or age < -300:
        raise PlanError(
            f"{source}: the plan is stale (made {age / 3600:.1f} h ago; plans hold for "
            f"{plan.max_age_s / 3600:.0f} h)",
            hint="make a new plan with --plan-out and review it",
        )
    for unit in plan.units:
        for name in (unit.src_tier, unit.dst_tier):
            if name not in site.tiers:
                raise PlanError(f"{source}: names tier {name!r}, which {site.source} does not define")
            now_url, then_url = mask_url(site.tiers[name].url), plan.tiers.get(name)
            if now_url != then_url:
                raise PlanError(f"{source}: tier {name} was {then_url} when planned and is {now_url} now")
        if unit.src_tier in plan.node_local and plan.host != socket.gethostname():
            raise PlanError(
                f"{source}: made on {plan.host} for node-local tier {unit.src_tier}; apply it on {plan.host}",
                hint="on each node: storekit tier --drain (e.g. srun --ntasks-per-node=1)",
            )


def with_stats(unit: PlanUnit, stats: Fingerprint) -> PlanUnit:
    return replace(unit, stats=stats)
