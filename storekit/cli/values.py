"""Option and argument values converted as storekit's CLI always converted them (Click's rules).

Typer 0.29 converts every value through a pydantic TypeAdapter built per parameter: importing
pydantic alone is ~0.07 s of every `storekit` run, `--keep-last 2.0` became 2, and a bad number
said "Input should be a valid integer, unable to parse string as an integer" without the value.
The parameters storekit has are str, int, float, bool and lists of str: importing this module
gives each the conversion Click did (`int()`, `float()`, Click's boolean words, a range check),
with Click's messages; any other type keeps Typer's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args, get_origin

import typer
from typer._coercion import RuntimeParam, build_runtime_param
from typer.core import TyperArgument, TyperOption

_TRUE = {"1", "true", "t", "yes", "y", "on"}
_FALSE = {"0", "false", "f", "no", "n", "off", ""}


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise ValueError


_CONVERT: dict[type, tuple[str, Callable[[Any], Any]]] = {
    str: ("string", lambda v: v if isinstance(v, str) else str(v)),
    int: ("integer", int),
    float: ("float", float),
    bool: ("boolean", _to_bool),
}


@dataclass(frozen=True)
class ClickValue(RuntimeParam):
    """One parameter's conversion: `kind` each value (each item of a list), then its range."""

    kind: type

    def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return [self._one(item, param, ctx) for item in value]
        return self._one(value, param, ctx)

    def _one(self, value: Any, param: Any, ctx: Any) -> Any:
        name, convert = _CONVERT[self.kind]
        low, high = self.parameter_info.min, self.parameter_info.max
        ranged = low is not None or high is not None
        try:
            converted = convert(value)
        except (TypeError, ValueError):
            what = f"{name} range" if ranged else name
            raise typer.BadParameter(f"{value!r} is not a valid {what}.", ctx=ctx, param=param) from None
        if (low is not None and converted < low) or (high is not None and converted > high):
            bounds = f"x<={high}" if low is None else f"x>={low}" if high is None else f"{low}<=x<={high}"
            raise typer.BadParameter(f"{converted} is not in the range {bounds}.", ctx=ctx, param=param)
        return converted


def _click_value(param: TyperOption | TyperArgument) -> RuntimeParam:
    """Click's conversion when `param`'s type is one storekit uses, else Typer's own."""
    annotation: Any = param.type_descriptor.annotation
    listed = get_origin(annotation) is list
    kind = get_args(annotation)[0] if listed else annotation
    if kind in _CONVERT:
        return ClickValue(param.type_descriptor.parameter_info, annotation, kind)
    return build_runtime_param(param.type_descriptor)


def _runtime_param(self: TyperOption | TyperArgument) -> RuntimeParam:
    if self._runtime_param is None:
        self._runtime_param = _click_value(self)
    return self._runtime_param


# every option and argument, `-h/--help` included (Click makes it on first use, outside `params`)
TyperOption.get_runtime_param = _runtime_param  # type: ignore[method-assign,assignment]
TyperArgument.get_runtime_param = _runtime_param  # type: ignore[method-assign,assignment]
