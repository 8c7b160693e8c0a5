"""Typed readers: one rule per kind of value people write, wherever they write it.

A command-line option, a key of storekit.toml, a layout or a pipeline file, a tier policy: each
reads its values with these, so `2G`, `14d`, `0.01` or `85%` mean the same everywhere and a bad
value gets the same words. A reader raises `Invalid` with the problem only; the caller adds where
it was (`ConfigError(file, key, ...)` for files, `UsageError("--option ...")` for options).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from storekit.units import parse_duration, parse_size


class Invalid(ValueError):
    """What is wrong with a value, without saying where it came from."""


def _got(value: Any) -> str:
    return f"got {value!r}"


def read_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise Invalid(f"expected true or false, {_got(value)}")
    return value


def read_str(value: Any, *, nonempty: bool = False) -> str:
    if not isinstance(value, str):
        raise Invalid(f"expected a string, got {type(value).__name__} {value!r}")
    if nonempty and not value:
        raise Invalid("must not be empty")
    return value


def read_int(value: Any, *, low: int | None = None, high: int | None = None, what: str = "") -> int:
    """A whole number in [low, high] (either bound optional). TOML gives ints; an option's text
    such as "8" is read too. `what` names the unit in the message ("threads")."""
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise Invalid(f"{value!r} is not a whole number") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"expected {_range_words(low, high, what)}, {_got(value)}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise Invalid(f"expected {_range_words(low, high, what)}, {_got(value)}")
    return value


def _range_words(low: int | None, high: int | None, what: str) -> str:
    noun = f"a whole number{f' of {what}' if what else ''}"
    if low is not None and high is not None:
        return f"{noun} from {low} to {high}"
    if low is not None:
        return f"{noun} ≥ {low}"
    if high is not None:
        return f"{noun} ≤ {high}"
    return noun


def read_number(value: Any, *, low: float | None = None, high: float | None = None) -> float:
    """A number (int or float) in [low, high]."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise Invalid(f"{value!r} is not a number") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Invalid(f"expected a number, {_got(value)}")
    if (low is not None and value < low) or (high is not None and value > high):
        span = f"{low:g} to {high:g}" if low is not None and high is not None else ""
        bound = span or (f"≥ {low:g}" if low is not None else f"≤ {high:g}")
        raise Invalid(f"{value:g} is out of range; expected {bound}")
    return float(value)


def read_positive(value: Any) -> float:
    """A number above 0 (a rate, a target time)."""
    number = read_number(value)
    if number <= 0:
        raise Invalid(f"must be greater than 0, {_got(value)}")
    return number


def read_fraction(value: Any) -> float:
    """A fraction in [0, 1), such as a held-out share of 0.01."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value < 1.0:
        raise Invalid(f"expected a fraction in [0, 1), e.g. 0.01, {_got(value)}")
    return float(value)


def read_percent(value: Any) -> float:
    """`"85%"` -> 0.85: a share strictly between 0% and 100% (a watermark)."""
    text = value.strip() if isinstance(value, str) else None
    if not text or not text.endswith("%"):
        raise Invalid(f'expected a percentage such as "85%", {_got(value)}')
    try:
        fraction = float(text[:-1].strip()) / 100
    except ValueError:
        raise Invalid(f'expected a percentage such as "85%", {_got(value)}') from None
    if not 0 < fraction < 1:
        raise Invalid(f"{value!r} is not between 0% and 100%")
    return fraction


def read_size(value: Any, *, low: int = 0) -> int:
    """Bytes, in storekit's one size grammar (units.parse_size): 512, 4K, 16MiB, 1GB; ≥ `low`."""
    if isinstance(value, bool):
        raise Invalid(f"expected a size such as 16MiB, {_got(value)}")
    if isinstance(value, str) and value.strip().startswith("-"):
        raise Invalid(f"{value!r}: sizes cannot be negative")
    try:
        size = parse_size(value)
    except (ValueError, TypeError) as exc:
        raise Invalid(str(exc)) from None
    if size < low:
        raise Invalid("must be greater than zero" if low == 1 else f"must be at least {low} bytes")
    return size


def read_duration(value: Any, *, low: float = 0.0) -> float:
    """Seconds from 90s, 15m, 12h, 14d, 2w (a bare number is seconds); ≥ `low`."""
    if isinstance(value, bool):
        raise Invalid(f"expected a duration such as 7d, {_got(value)}")
    try:
        seconds = parse_duration(value)
    except (ValueError, TypeError) as exc:
        raise Invalid(str(exc)) from None
    if seconds < low:
        raise Invalid(f"{value!r} is below {low:g} seconds" if low else f"{value!r} is negative")
    return seconds


def read_choice(value: Any, choices: Iterable[str]) -> str:
    options = tuple(choices)
    if not isinstance(value, str) or value not in options:
        raise Invalid(f"expected one of {', '.join(options)}, {_got(value)}")
    return value


def read_str_list(value: Any, *, split_commas: bool = False, nonempty_items: bool = False) -> tuple[str, ...]:
    """A list of strings; `split_commas`: a single string is `a,b,c` (how an option spells a list)."""
    items: Sequence[Any]
    if isinstance(value, str):
        items = [i.strip() for i in value.split(",")] if split_commas else [value]
        items = [i for i in items if i] if split_commas else items
    elif isinstance(value, list | tuple):
        items = value
    else:
        raise Invalid(f"expected a list of strings, {_got(value)}")
    if not all(isinstance(i, str) and (i or not nonempty_items) for i in items):
        raise Invalid(f"expected a list of strings, {_got(value)}")
    return tuple(items)


def read_int_list(text: str, *, low: int | None = None, high: int | None = None) -> tuple[int, ...]:
    """`1,2,4` -> (1, 2, 4), sorted, without duplicates (a sweep such as --workers)."""
    return tuple(sorted({read_int(item, low=low, high=high) for item in _items(text)}))


def read_size_list(text: str, *, low: int = 1) -> tuple[int, ...]:
    """`4k,1M` -> (4096, 1048576), sorted, without duplicates (a sweep such as --block-size)."""
    return tuple(sorted({read_size(item, low=low) for item in _items(text)}))


def _items(text: str) -> list[str]:
    items = [p.strip() for p in str(text).split(",") if p.strip()]
    if not items:
        raise Invalid(f"expected a comma-separated list, got {text!r}")
    return items
