"""Relative paths inside a store root: normalised, and refused when they would escape it."""

from __future__ import annotations

import os
import posixpath

from storekit.errors import PathEscapeError


def clean_rel(rel: str, *, what: str = "path") -> str:
    """Return `rel` as a normalised relative POSIX path ('' for the root).

    Refuses absolute paths, `..` components, NUL bytes and backslashes (which some backends treat as
    separators), so no relative path can name anything outside the root it is joined to.
    """
    if "\x00" in rel:
        raise PathEscapeError(f"{what} {rel!r} contains a NUL byte")
    if "\\" in rel:
        raise PathEscapeError(f"{what} {rel!r} contains a backslash; use '/' as separator")
    if rel.startswith("/"):
        raise PathEscapeError(
            f"{what} {rel!r} is absolute; expected a path relative to the tier root",
            hint="drop the leading '/'",
        )
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise PathEscapeError(f"{what} {rel!r} contains '..' and could escape the tier root")
    return "/".join(parts)


def resolves_outside(path: str, root: str) -> str | None:
    """Where `path` really is, symlinks resolved, when that is outside `root`; None when inside it
    (the root itself included). The one check behind "a symlink may not lead out of a tier"."""
    real, root_real = os.path.realpath(path), os.path.realpath(root)
    if real == root_real or real.startswith(root_real.rstrip("/") + "/"):
        return None
    return real


def join_rel(*parts: str) -> str:
    return clean_rel(posixpath.join(*[p for p in parts if p]))
