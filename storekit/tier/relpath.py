"""Tier-relative paths from plans, stubs and journals: plain, normalised, and inside their tier.

A path a plan names becomes a directory below a tier's root or an S3 key below its prefix; a `..`,
an empty or `.` part, a leading `/` or a backslash could put bytes outside the tier (or a key no
file system could hold), so every such path is checked before anything is read or written.
"""

from __future__ import annotations

from storekit.errors import UsageError


def bad_rel(path: object) -> str | None:
    """Why `path` is not a plain tier-relative path (None: it is one)."""
    if not isinstance(path, str) or not path:
        return "empty or not a string"
    if path.startswith("/"):
        return "absolute (starts with /)"
    if "\\" in path or "\0" in path or any(ord(c) < 32 for c in path):
        return "holds a backslash or a control character"
    parts = path.split("/")
    if ".." in parts:
        return "leaves its tier (a '..' part)"
    if any(p in ("", ".") for p in parts):
        return "not normalised (an empty or '.' part)"
    return None


def check_rel(path: str, what: str) -> str:
    """`path` if it stays inside its tier; UsageError (exit 2) naming `what` otherwise."""
    why = bad_rel(path)
    if why is not None:
        raise UsageError(f"{what} {path!r}: {why}; a tier path must stay inside its tier")
    return path
