"""Site config (`storekit.toml`): named tiers, each an fsspec URL plus options and a role.

Found via `--config`, then `$STOREKIT_CONFIG`, then `./storekit.toml`, then
`$XDG_CONFIG_HOME/storekit/storekit.toml` (~/.config when unset), then `/etc/storekit.toml`; with none
of those, one local tier named `local` rooted at `./storage` is the embedded default, so every command
works on a fresh machine with no file at all.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from storekit.errors import ConfigError, NotFoundError, UsageError, refuse_not_regular
from storekit.policies import Policy, parse_policies
from storekit.readers import Invalid, read_duration, read_int, read_positive, read_size
from storekit.slurmopts import parse_slurm_table
from storekit.tomlkeys import get_choice, get_str, named_table, parse_toml, reject_unknown

ROLES = ("burst", "parallel", "archive", "plain")
SUPPORTED_SCHEMES = ("file", "s3")
DEFAULT_LAYOUT = "llm-cluster"
ENV_CONFIG = "STOREKIT_CONFIG"
ENV_TIER = "STOREKIT_TIER"  # the tier commands act on when --tier is not given (instead of default_tier)
SYSTEM_CONFIG = Path("/etc/storekit.toml")
EMBEDDED_SOURCE = "<embedded default: ./storage>"
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
_NAME_RULE = "tier names start with a letter and use letters, digits, '-', '_'"
_SECRET_RE = re.compile(r"(key|secret|token|password|passwd|credential)", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class TierConfig:
    name: str
    url: str  # normalised: file:///abs/path or s3://bucket/prefix
    role: str = "plain"
    options: Mapping[str, Any] = field(default_factory=dict)
    layout: str = DEFAULT_LAYOUT
    # [tiers.NAME.transfer], checked: threads, max_in_flight (bytes), bandwidth (bytes/s), retry_budget (s)
    transfer: Mapping[str, float] = field(default_factory=dict)
    # what a file:// tier's root must be mounted from (/proc/self/mountinfo): else the tier is down
    mount_type: str | None = None
    mount_source: str | None = None

    @property
    def scheme(self) -> str:
        return urlsplit(self.url).scheme

    @property
    def local_root(self) -> str | None:
        """The directory a `file://` tier is (None for other schemes)."""
        return file_url_path(self.url) if self.scheme == "file" else None

    def display_options(self) -> dict[str, Any]:
        """Options safe to print: anything that looks like a credential is masked."""
        return {k: mask_value(k, v) for k, v in self.options.items()}


@dataclass(frozen=True, kw_only=True)
class SiteConfig:
    source: str  # the file it came from, or "<embedded default>"
    tiers: Mapping[str, TierConfig]
    default_tier: str
    policies: Mapping[str, Policy] = field(default_factory=dict)  # [policies.NAME]: tier rules
    slurm: Mapping[str, Any] = field(default_factory=dict)  # [slurm]: site defaults (storekit/slurmopts.py)

    def tier(self, name: str | None) -> TierConfig:
        key = name or self.default_tier
        if key not in self.tiers:
            known = ", ".join(sorted(self.tiers)) or "none"
            raise NotFoundError(
                f"no tier named {key!r} in {self.source}",
                hint=f"known tiers: {known}",
            )
        return self.tiers[key]


def mask_value(key: str, value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: mask_value(k, v) for k, v in value.items()}
    if _SECRET_RE.search(key) and key not in ("endpoint_url",):
        return "***"
    if isinstance(value, str) and "://" in value:
        return mask_url(value)  # e.g. an endpoint_url with user:password@ in it
    return value


def url_has_credentials(url: str) -> bool:
    """Does `url` carry userinfo (`scheme://user:secret@host`)? Errs towards yes.

    A secret with a `/` in it (AWS secrets often have one) splits the URL before the `@`:
    `s3://KEY:SE/CRET@bucket` parses as bucket `KEY:SE`, so a `:` in a bucket counts too.
    """
    if "://" not in url:
        return False
    try:
        parts = urlsplit(url)
    except ValueError:
        return "@" in url
    return "@" in parts.netloc or (parts.scheme == "s3" and ":" in parts.netloc)


def mask_url(url: str) -> str:
    """Hide credentials embedded in a URL (`s3://key:secret@bucket/...` -> `s3://***@bucket/...`)."""
    if not url_has_credentials(url):
        return url
    scheme, _, rest = url.partition("://")
    _, at, host = rest.partition("@")
    return f"{scheme}://***@{host}" if at else f"{scheme}://***"


# `scheme://anything-without-spaces@` in free text: the userinfo of a URL (last line of defence)
_USERINFO_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^\s@'\"<>]*@")


def redact_urls(text: str) -> str:
    """Mask the userinfo of every URL in a message or traceback before it is printed."""
    return _USERINFO_RE.sub(r"\1***@", text)


URL_CREDENTIALS_HINT = (
    "give S3 credentials as key/secret in the tier's [tiers.NAME.options] table, or as "
    "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or as a profile (AWS_PROFILE); never in a URL"
)


def refuse_url_credentials(url: str, where: str) -> None:
    """A URL with `user:secret@` in it is a usage error: it would end in shell history, logs and plans."""
    if url_has_credentials(url):
        raise UsageError(
            f"{where}: credentials in a URL are refused ({mask_url(url)})", hint=URL_CREDENTIALS_HINT
        )


def embedded_default(cwd: Path | None = None) -> SiteConfig:
    root = (cwd or Path.cwd()) / "storage"
    tier = TierConfig(name="local", url=root.resolve().as_uri(), role="plain")
    return SiteConfig(source=EMBEDDED_SOURCE, tiers={"local": tier}, default_tier="local")


def user_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "storekit" / "storekit.toml"


def config_search_path() -> list[Path]:
    """Where a config is looked for after --config and $STOREKIT_CONFIG, first found wins."""
    return [Path("storekit.toml"), user_config_path(), SYSTEM_CONFIG]


def find_config_file(explicit: str | None) -> Path | None:
    if explicit:
        path = Path(explicit)
        refuse_not_regular(explicit)
        if not path.is_file():
            raise NotFoundError(f"config file {explicit} does not exist", hint="check --config")
        return path
    env = os.environ.get(ENV_CONFIG)
    if env:
        path = Path(env)
        refuse_not_regular(env)
        if not path.is_file():
            raise NotFoundError(f"config file {env} (from ${ENV_CONFIG}) does not exist")
        return path
    return next((p for p in config_search_path() if _found(p)), None)


def _found(path: Path) -> bool:
    """A search-path candidate counts when it is a file this user can see: one behind a directory it
    may not search (another user's ~/.config, with $HOME left pointing there by `su`/setuid) is not
    its config, so the search goes on rather than failing on it."""
    try:
        return path.is_file()
    except PermissionError:
        return False


def load_config(explicit: str | None = None) -> SiteConfig:
    path = find_config_file(explicit)
    if path is None:
        site = embedded_default()
    else:
        site = parse_config(path.read_bytes(), source=str(path), base_dir=path.resolve().parent)
    chosen = os.environ.get(ENV_TIER)
    if chosen:
        if chosen not in site.tiers:
            raise NotFoundError(
                f"${ENV_TIER}={chosen} names no tier in {site.source}",
                hint=f"known tiers: {', '.join(sorted(site.tiers))}; unset it to use default_tier",
            )
        site = replace(site, default_tier=chosen)
    return site


def parse_config(data: bytes, *, source: str, base_dir: Path) -> SiteConfig:
    raw = parse_toml(data, source)
    reject_unknown(raw, {"tiers", "default_tier", "layout", "policies", "slurm"}, source, "")
    layout = get_str(raw, "layout", source, "layout", default=DEFAULT_LAYOUT)
    tiers_raw = raw.get("tiers")
    if not isinstance(tiers_raw, dict) or not tiers_raw:
        raise ConfigError(source, "tiers", "expected a table of at least one tier, e.g. [tiers.nvme]")
    tiers: dict[str, TierConfig] = {}
    for name, body in tiers_raw.items():
        tiers[name] = _parse_tier(name, body, source, base_dir, layout)
    default = get_str(raw, "default_tier", source, "default_tier", default=next(iter(tiers)))
    if default not in tiers:
        known = ", ".join(tiers)
        raise ConfigError(source, "default_tier", f"names unknown tier {default!r}; known: {known}")
    policies = parse_policies(raw.get("policies"), source)
    slurm = parse_slurm_table(raw.get("slurm"), source) if "slurm" in raw else {}
    return SiteConfig(source=source, tiers=tiers, default_tier=default, policies=policies, slurm=slurm)


def _parse_tier(name: str, body: Any, source: str, base_dir: Path, layout: str) -> TierConfig:
    key, body = named_table(
        "tiers",
        name,
        body,
        source,
        {"url", "role", "options", "layout", "transfer", "mount_type", "mount_source"},
        _NAME_RE,
        _NAME_RULE,
        " with at least `url`",
    )
    url = get_str(body, "url", source, f"{key}.url")
    role = get_choice(body, "role", source, f"{key}.role", ROLES, default="plain")
    options = body.get("options", {})
    if not isinstance(options, dict):
        raise ConfigError(source, f"{key}.options", "expected a table of fsspec storage options")
    tier_layout = get_str(body, "layout", source, f"{key}.layout", default=layout)
    normalised = normalise_url(url, source, f"{key}.url", base_dir)
    if urlsplit(normalised).scheme == "s3":
        _check_s3_options(options, source, f"{key}.options")
    mount = {
        m: get_str(body, m, source, f"{key}.{m}", default="") or None for m in ("mount_type", "mount_source")
    }
    if any(mount.values()) and urlsplit(normalised).scheme != "file":
        raise ConfigError(source, f"{key}.mount_type", "only a file:// tier is mounted; remove it")
    return TierConfig(
        name=name,
        url=normalised,
        role=role,
        options=options,
        layout=tier_layout,
        transfer=_parse_transfer(body.get("transfer", {}), source, key),
        mount_type=mount["mount_type"],
        mount_source=mount["mount_source"],
    )


_TRANSFER_KEYS: dict[str, tuple[Callable[[Any], float], str]] = {  # key -> (reader, a value's form)
    "threads": (lambda v: read_int(v, low=1), "a whole number of threads above 0, e.g. 8"),
    "max_in_flight": (lambda v: read_size(v, low=1), "a size above 0, e.g. 512MiB"),
    "bandwidth": (lambda v: read_size(v, low=1), "bytes per second as a size above 0, e.g. 200MB"),
    "retry_budget": (lambda v: read_positive(read_duration(v)), "a duration above 0, e.g. 120s or 5m"),
}


def _parse_transfer(raw: Any, source: str, key: str) -> dict[str, float]:
    """How `storekit tier` moves data to and from an S3 tier: its threads, memory and bandwidth
    caps and how long one request is retried (a gateway restart must fit)."""
    if not isinstance(raw, dict):
        raise ConfigError(source, f"{key}.transfer", "expected a table (threads, max_in_flight, ...)")
    reject_unknown(raw, set(_TRANSFER_KEYS), source, f"{key}.transfer")
    out: dict[str, float] = {}
    for name, value in raw.items():
        read, expected = _TRANSFER_KEYS[name]
        try:
            out[name] = read(value)
        except Invalid:
            problem = f"expected {expected}, got {value!r}"
            raise ConfigError(source, f"{key}.transfer.{name}", problem) from None
    return out


def file_url_path(url: str) -> str:
    """The local path a `file://` URL names: the inverse of the normalisation below (Path.as_uri
    percent-encodes, so `/data/my storage` is `file:///data/my%20storage`)."""
    return os.path.normpath(unquote(urlsplit(url).path))


def file_url_spelled(url: str) -> str:
    """The path a `file://` URL as a user wrote it names, taken literally (a user's `%20` or `#` is
    part of the name); `file://localhost/x` is `/x`, and `file://./x` (a common slip) is `./x`."""
    rest = url[len("file://") :]
    host, slash, path = rest.partition("/")
    return slash + path if host in ("", "localhost") else rest


_ENV_REF_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(url: str, source: str, key: str) -> str:
    """`${NAME}` (or `${NAME:-default}`) in a tier URL replaced by that environment variable: a
    node-local tier kept per node on one shared file system (`/scratch/${SLURMD_NODENAME}/nvme`).
    An unset NAME without a default is a config error naming the key; a bare `$` stays as written."""

    def value(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = os.environ.get(name) or default
        if found is None:
            problem = f"${{{name}}} is not set (write ${{{name}:-DEFAULT}} for a default)"
            raise ConfigError(source, key, problem)
        return found

    return _ENV_REF_RE.sub(value, url)


def normalise_url(url: str, source: str, key: str, base_dir: Path) -> str:
    """`/abs`, `./rel` (relative to the config file) and `file://` become `file:///abs`; `s3://` stays.
    `${NAME}` is taken from the environment first (expand_env)."""
    url = expand_env(url, source, key) if "${" in url else url
    if not url:
        raise ConfigError(source, key, "expected a URL such as file:///lustre/storage or s3://bucket/prefix")
    if url_has_credentials(url):
        raise ConfigError(
            source, key, f"credentials in a URL are refused ({mask_url(url)})", hint=URL_CREDENTIALS_HINT
        )
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ConfigError(source, key, f"not a valid URL ({exc})") from None
    if parts.scheme in ("", "file"):
        path = Path(file_url_spelled(url) if parts.scheme == "file" else url)
        if not path.is_absolute():
            path = base_dir / path
        return Path(os.path.normpath(path)).as_uri()
    if parts.scheme not in SUPPORTED_SCHEMES:
        raise ConfigError(
            source, key, f"unsupported scheme {parts.scheme!r}; expected file:// (any POSIX mount) or s3://"
        )
    if parts.scheme == "s3" and not parts.hostname and not parts.netloc:
        raise ConfigError(source, key, "an s3:// URL needs a bucket: s3://bucket/prefix")
    return url.rstrip("/")


# an s3 tier's options: what store.s3client gives botocore (client_kwargs: create_client's arguments,
# config_kwargs: botocore Config's)
_S3_STRING_OPTIONS = {"endpoint_url", "key", "secret", "token", "profile"}
_S3_TABLE_OPTIONS = {"client_kwargs", "config_kwargs"}
S3_OPTIONS = frozenset(_S3_STRING_OPTIONS | _S3_TABLE_OPTIONS)


def _check_s3_options(options: Mapping[str, Any], source: str, key: str) -> None:
    """Catch typos and wrong types here, with the key named, instead of as a traceback on first use."""
    known = S3_OPTIONS
    for name, value in options.items():
        where = f"{key}.{name}"
        if name not in known:
            raise ConfigError(source, where, f"unknown s3 option; expected one of {', '.join(sorted(known))}")
        if name in _S3_STRING_OPTIONS and not isinstance(value, str):
            raise ConfigError(source, where, f"expected a string, got {type(value).__name__}")
        if name in _S3_TABLE_OPTIONS and not isinstance(value, dict):
            raise ConfigError(source, where, "expected a table")
    endpoint = options.get("endpoint_url")
    if endpoint is not None:
        try:
            parts = urlsplit(endpoint)
            valid = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
        except ValueError:  # e.g. a port that is not a number, an unclosed [ipv6
            valid = False
        if not valid:
            raise ConfigError(source, f"{key}.endpoint_url", "expected a URL like http(s)://host[:port]")
        if parts.username is not None or parts.password is not None:
            raise ConfigError(
                source,
                f"{key}.endpoint_url",
                f"credentials in the URL ({mask_url(endpoint)}) are not used by S3",
                hint="put them in key/secret, or use AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile",
            )
