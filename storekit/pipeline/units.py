"""Human sizes ("1GiB", "512MB", "64k") and fractions, parsed strictly."""

from __future__ import annotations

import re

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?)(b?)\s*$", re.IGNORECASE)
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def parse_size(value: str | int) -> int:
    """`1GiB` -> 2**30, `1GB` -> 10**9, `64k` -> 65536 (bare k/M/G are binary, as in dd and fio)."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 1GiB, 512MB or 1000000, got a boolean")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"expected a non-negative size, got {value}")
        return value
    match = _SIZE_RE.match(value)
    if not match:
        raise ValueError(f"expected a size such as 1GiB, 512MB or 1000000, got {value!r}")
    number, prefix, binary, byte = match.groups()
    power = _POWERS[prefix.lower()]
    base = 1024 if binary or (prefix and not byte) else 1000
    size = float(number) * base**power
    return int(size)


def format_size(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"
