"""Relative paths inside a store root: normalised, and refused when they would escape it."""

from __future__ import annotations

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


def join_rel(*parts: str) -> str:
    return clean_rel(posixpath.join(*[p for p in parts if p]))


def parent_rel(rel: str) -> str:
    return posixpath.dirname(clean_rel(rel))


def base_name(rel: str) -> str:
    return posixpath.basename(clean_rel(rel))
