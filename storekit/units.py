"""Sizes and durations as people write them: `4MiB`, `4M`, `1.5 TB`, `512`, `14d`, `90s`."""

from __future__ import annotations

import re

# one grammar for every size storekit reads (options, config, pipeline and layout files), as coreutils
# and fio read them: K M G T P and KiB MiB GiB TiB PiB are powers of 1024, KB MB GB TB PB powers of 1000
_SIZE_UNITS = {"": 1, "b": 1}
for _n, _letter in enumerate("kmgtp", start=1):
    _SIZE_UNITS[_letter] = _SIZE_UNITS[_letter + "i"] = _SIZE_UNITS[_letter + "ib"] = 1024**_n
    _SIZE_UNITS[_letter + "b"] = 1000**_n
SIZE_HELP = "K M G T P and KiB..PiB = 1024^n; KB MB GB TB PB = 1000^n."
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([smhdw]?)\s*$")


def parse_size(text: str | int) -> int:
    """Bytes from `4MiB` or `4M` (4·2^20), `1GB` (10^9), `1.5T`, `512`; ValueError otherwise."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"size {text} is negative")
        return text
    match = _SIZE_RE.match(str(text))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _SIZE_UNITS:
        raise ValueError(f"{text!r} is not a size; expected e.g. 512, 4K, 16MiB, 1GB, 2T ({SIZE_HELP})")
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def parse_duration(text: str | int) -> float:
    """Seconds from `90s`, `15m`, `12h`, `14d`, `2w` (a bare number is seconds)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    match = _DURATION_RE.match(str(text))
    if not match:
        raise ValueError(f"{text!r} is not a duration; expected e.g. 90s, 15m, 12h, 14d, 2w")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2) or "s"]


def format_bytes(n: float, *, compact: bool = False) -> str:
    """`2.0 KiB`, `3.5 GiB`: binary units, one decimal. `compact` (labels of sizes people chose, such as
    a block size): no decimal when the value is whole in its unit, `1 MiB` but `1.5 KiB`."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            if unit == "B" or (compact and n == int(n)):
                return f"{n:.0f} {unit}"
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def rate_unit(value: float) -> tuple[str, float]:
    """The unit a bandwidth of `value` bytes/s is shown in, and its scale: decimal, as fio and IOR
    report (GB/s, MB/s, kB/s, B/s). A table picks it per value, a plot axis for its largest value."""
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if value >= scale:
            return unit, scale
    return "B/s", 1.0


def format_duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"
