"""Typed reads of parsed TOML tables that fail as ConfigError naming the file and the key.

A value's type is checked by its reader in storekit.readers (size, duration, int range, choice, ...),
the one a command-line option of the same kind uses; these add where the value came from.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from storekit.errors import ConfigError
from storekit.readers import Invalid, read_choice

T = TypeVar("T")


def parse_toml(data: bytes, source: str) -> dict[str, Any]:
    """The one way a config, layout or pipeline file is read: UTF-8 TOML, errors naming the file."""
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(source, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, None, f"invalid TOML: {exc}") from None


def get_str(raw: Mapping[str, Any], name: str, source: str, key: str, default: str | None = None) -> str:
    """raw[name] as a string; `default` when absent (absent and no default: an error)."""
    if name not in raw:
        if default is None:
            raise ConfigError(source, key, "is required (a string)")
        return default
    value = raw[name]
    if not isinstance(value, str):
        raise ConfigError(source, key, f"expected a string, got {type(value).__name__} {value!r}")
    return value


def get_bool(raw: Mapping[str, Any], name: str, source: str, key: str, default: bool) -> bool:
    """raw[name] as a boolean; `default` when absent."""
    value = raw.get(name, default)
    if not isinstance(value, bool):
        raise ConfigError(source, key, "expected true or false")
    return value


def get_read(
    raw: Mapping[str, Any], name: str, read: Callable[[Any], T], source: str, prefix: str
) -> T | None:
    """raw[name] through its typed reader (storekit.readers); None when absent. A bad value is an
    error naming `prefix.name`, in the reader's words."""
    if name not in raw:
        return None
    try:
        return read(raw[name])
    except Invalid as exc:
        raise ConfigError(source, f"{prefix}.{name}", str(exc)) from None


def get_choice(
    raw: Mapping[str, Any],
    name: str,
    source: str,
    key: str,
    choices: Iterable[str],
    default: str | None = None,
) -> str:
    """raw[name], a string that is one of `choices`; `default` when absent (absent and no default:
    an error)."""
    try:
        return read_choice(get_str(raw, name, source, key, default), choices)
    except Invalid as exc:
        raise ConfigError(source, key, str(exc)) from None


def get_regex(raw: Mapping[str, Any], name: str, source: str, key: str) -> re.Pattern[str]:
    """raw[name] (required) compiled as a regular expression."""
    text = get_str(raw, name, source, key)
    try:
        return re.compile(text)
    except re.error as exc:
        raise ConfigError(source, key, f"not a valid regular expression: {exc}") from None


def get_table(raw: Mapping[str, Any], name: str, source: str, key: str) -> dict[str, Any]:
    value = raw.get(name)
    if not isinstance(value, dict):
        raise ConfigError(source, key, "expected a table")
    return value


def reject_unknown(raw: Mapping[str, Any], allowed: set[str], source: str, prefix: str) -> None:
    """A misspelt key is an error, not a silently ignored option."""
    for name in raw:
        if name not in allowed:
            key = f"{prefix}.{name}" if prefix else name
            raise ConfigError(source, key, f"unknown key; expected one of {', '.join(sorted(allowed))}")


def named_table(
    kind: str,
    name: str,
    body: Any,
    source: str,
    keys: set[str],
    name_re: re.Pattern[str],
    name_rule: str,
    needs: str = "",
) -> tuple[str, dict[str, Any]]:
    """`[KIND.NAME]` (a tier, area, writer or policy): its key and body, once the name follows
    `name_re` (else `name_rule` is the error), the body is a table (`needs` says what it must hold)
    and holds no key but `keys`."""
    key = f"{kind}.{name}"
    if not name_re.match(name):
        raise ConfigError(source, key, name_rule)
    if not isinstance(body, dict):
        raise ConfigError(source, key, f"expected a table{needs}")
    reject_unknown(body, keys, source, key)
    return key, body
