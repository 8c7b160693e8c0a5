"""The site's key for plan digests: `<tier journal>/plan.key` (32 random bytes, mode 0600).

A plan's digest is an HMAC-SHA256 over its body with this key, so a plan edited by hand (even with
its digest recomputed) is refused: only storekit at this site makes a digest `--apply` accepts. The
key lives in the site's private state beside the unit journals (a shared tier: a plan made on one
node applies on another). It is made once, on the first `--plan-out`; never printed.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
from pathlib import Path

from storekit.config import SiteConfig
from storekit.durable import fsync_dir
from storekit.errors import MismatchError

KEY_NAME = "plan.key"
KEY_BYTES = 32


def key_path(site: SiteConfig) -> Path:
    from storekit.tier.moveunit import journal_dir_for

    return journal_dir_for(site) / KEY_NAME


def plan_key(site: SiteConfig, *, create: bool) -> bytes:
    """The site's key; made (atomically, never replaced) when `create` and there is none yet."""
    path = key_path(site)
    try:
        return _read(path)
    except FileNotFoundError:
        if not create:
            raise MismatchError(
                f"{path}: no plan key at this site, so no plan made here can be checked; it is not applied",
                hint="make a new plan with --plan-out",
            ) from None
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.parent / f".{KEY_NAME}.{os.getpid()}.new"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, os.urandom(KEY_BYTES))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(temp, path)  # never replaces: two first plans at once end with one key
    except FileExistsError:
        pass
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
    fsync_dir(path.parent)
    return _read(path)


def _read(path: Path) -> bytes:
    data = path.read_bytes()
    if len(data) != KEY_BYTES:
        raise MismatchError(f"{path}: not a plan key ({len(data)} bytes, expected {KEY_BYTES})")
    return data


def keyed_digest(key: bytes, canonical: bytes) -> str:
    return "hmac-sha256:" + hmac.new(key, canonical, hashlib.sha256).hexdigest()


def same_digest(a: str, b: object) -> bool:
    return isinstance(b, str) and hmac.compare_digest(a, b)
