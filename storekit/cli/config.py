"""`storekit config show` and `storekit config check`: the resolved site config, and whether each tier
can be reached. Credentials are masked in every output."""

from __future__ import annotations

import dataclasses
from typing import Any

import typer
from rich.console import Console

from storekit.cli.common import (
    ConfigOpt,
    EveryTierOpt,
    JsonOpt,
    QuietOpt,
    exit_codes,
    make_output,
    noun_app,
    site_config,
)
from storekit.config import SiteConfig, TierConfig, mask_url
from storekit.errors import ExitCode, StorekitError
from storekit.ops.s3transfer import S3Transfer, TransferConfig
from storekit.store import open_store
from storekit.store.s3delete import bucket_versioning, check_unversioned

config_app = noun_app(None, "Show the site config (storekit.toml) and check that its tiers can be reached.")


def register(app: typer.Typer) -> None:
    app.add_typer(config_app, name="config")


def _tier_doc(cfg: SiteConfig, tier: TierConfig) -> dict[str, Any]:
    return {
        "name": tier.name,
        "url": mask_url(tier.url),
        "scheme": tier.scheme,
        "role": tier.role,
        "layout": tier.layout,
        "default": tier.name == cfg.default_tier,
        "options": tier.display_options(),
        "transfer": dict(tier.transfer),
        "mount_type": tier.mount_type,
        "mount_source": tier.mount_source,
    }


def _selected(cfg: SiteConfig, tier: str | None) -> list[TierConfig]:
    return [cfg.tier(tier)] if tier else list(cfg.tiers.values())


@config_app.command("show", epilog=exit_codes(ExitCode.USAGE, ExitCode.NOT_FOUND))
def show(
    tier: EveryTierOpt = None,
    json: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Print the resolved tiers: name, URL, role, layout and storage options, credentials masked.

    Shows where the config came from (--config, $STOREKIT_CONFIG, ./storekit.toml or the embedded
    default) and which tier is the default. Contacts no storage; a malformed config file is reported
    with its file and key (exit 2).

    \b
    Examples:
      storekit config show
      storekit config show --json --config /etc/storekit/storekit.toml \\
          | jq '.tiers[].url'
    """
    out = make_output(json, quiet)
    cfg = site_config(config)
    tiers = [_tier_doc(cfg, t) for t in _selected(cfg, tier)]
    policies = [p.to_dict() for p in cfg.policies.values()]
    out.result(
        "config show",
        {"source": cfg.source, "default_tier": cfg.default_tier, "tiers": tiers, "policies": policies},
        lambda c: _render_show(c, cfg.source, cfg.default_tier, tiers, policies),
    )


def _render_show(
    c: Console, source: str, default: str, tiers: list[dict[str, Any]], policies: list[dict[str, Any]]
) -> None:
    # plain lines, not a table: URLs must never be cut short, also when piped or in a narrow terminal;
    # columns padded to their widest entry so they line up
    c.print(f"tiers from {source} (default: {default})", markup=False)
    name_w = max(len(t["name"]) for t in tiers)
    url_w = max(len(t["url"]) for t in tiers)
    for t in tiers:
        extra = [f"{k}={v}" for k, v in t["options"].items()]
        extra += [f"transfer.{k}={v:g}" for k, v in t["transfer"].items()]
        extra += [f"{k}={t[k]}" for k in ("mount_type", "mount_source") if t[k]]
        head = f"  {t['name']:<{name_w}}  {t['role']:<8}  {t['url']:<{url_w}}"
        line = f"{head}  layout={t['layout']}  {' '.join(extra)}"
        c.print(line.rstrip(), markup=False)
    if policies:
        c.print("policies:", markup=False)
        width = max(len(p["name"]) for p in policies)
        for p in policies:
            rules = " ".join(
                f"{k}={v}"
                for k, v in p.items()
                if k not in ("name", "source", "action") and v not in (None, [], "")
            )
            c.print(f"  {p['name']:<{width}}  {p['action']:<7}  {rules}".rstrip(), markup=False)


@config_app.command(
    "check", epilog=exit_codes(ExitCode.ERROR, ExitCode.USAGE, ExitCode.NOT_FOUND, ExitCode.RETRYABLE)
)
def check(
    tier: EveryTierOpt = None,
    json: JsonOpt = False,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Contact every tier (or one with --tier) and report whether it can be reached.

    A POSIX tier is reachable when its root or the root's parent exists (the mount is there); an S3
    tier when its endpoint answers and the bucket exists. Read-only: it creates nothing.

    For each reachable tier it shows what that tier's storage can do, probed there: atomic rename,
    directories, permission bits, free space, user metadata (xattrs on POSIX), Lustre striping.
    For S3 it shows the bucket's versioning; an archive tier's bucket must never have had it
    (deletes there keep the bytes), otherwise exit 1.

    Exit 0 when all are reachable, 5 when a tier cannot be reached (retry later or fix the mount or
    endpoint), 3 when a bucket does not exist, 1 for a versioned archive bucket, 2 for a malformed
    config.

    \b
    Examples:
      storekit config check
      storekit config check --tier archive --json
    """
    out = make_output(json, quiet)
    cfg = site_config(config)
    results: list[dict[str, Any]] = []
    failures: list[StorekitError] = []
    for t in _selected(cfg, tier):
        doc: dict[str, Any] = {"name": t.name, "url": mask_url(t.url), "reachable": False, "error": None}
        try:
            store = open_store(t)
            store.probe()
            doc["reachable"] = True
            doc["capabilities"] = dataclasses.asdict(store.capabilities)
            if t.scheme == "s3":
                doc["versioning"] = _versioning(t)
        except StorekitError as exc:
            failures.append(exc)
            doc["error"] = exc.message
        results.append(doc)
    out.result("config check", {"source": cfg.source, "tiers": results}, lambda c: _render_check(c, results))
    if failures:
        first = failures[0]  # its class sets the exit code: 5 unreachable, 3 missing bucket
        if len(failures) > 1:
            first.message = f"{len(failures)} tiers failed: " + "; ".join(f.message for f in failures)
            first.args = (first.message,)
        raise first


def _versioning(tier: TierConfig) -> str | None:
    """The bucket's versioning; an archive tier must have none (deletes there would keep the bytes)."""
    with S3Transfer.for_tier(tier, config=TransferConfig(threads=1)) as engine:
        if tier.role == "archive":
            check_unversioned(engine)
            return None
        return bucket_versioning(engine)


def _render_check(c: Console, results: list[dict[str, Any]]) -> None:
    for r in results:
        state = "reachable" if r["reachable"] else f"NOT reachable: {r['error']}"
        if r["reachable"] and r["error"]:
            state = f"reachable, but {r['error']}"
        c.print(f"tier {r['name']} ({r['url']}): {state}", markup=False)
        caps = r.get("capabilities")
        if caps:
            has = [name for name, on in caps.items() if on] or ["none"]
            lacks = [name for name, on in caps.items() if not on] or ["none"]
            c.print(f"  can: {' '.join(has)}; cannot: {' '.join(lacks)}", markup=False)
        if "versioning" in r:
            c.print(f"  bucket versioning: {r['versioning'] or 'never enabled'}", markup=False)
