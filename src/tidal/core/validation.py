"""Pydantic validation errors as users read them: one line per problem, naming the config key,
the flag that set it (where the caller knows the flags) and, for a number out of range, the
range the field accepts, read from the field's declared bounds (``Field(gt=…, le=…)``)."""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import annotated_types as at
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

RANGE_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal"})
"""Pydantic error types of a number outside its field's bounds."""


def model_of(annotation: Any) -> type[BaseModel] | None:
    """The model class of a field typed ``Model`` or ``Model | None``."""
    options = (
        typing.get_args(annotation)
        if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union
        else (annotation,)
    )
    for a in options:
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
    return None


def field_at(model: type[BaseModel], loc: Sequence[str | int]) -> FieldInfo | None:
    """The field an error location points at (list indices and a union member's tag after
    the field are skipped; None: not a field of ``model``)."""
    cls: type[BaseModel] | None = model
    info = None
    for part in loc:
        if isinstance(part, int):
            continue
        if cls is not None and part in cls.model_fields:
            info = cls.model_fields[part]
            cls = model_of(info.annotation)
        elif info is None or cls is not None:
            return None
    return info


def _num(v: Any) -> str:
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return str(v)


def accepted_range(info: FieldInfo | None) -> str | None:
    """``0 < value ≤ 1``, ``value ≥ 1`` …: the bounds ``info`` declares (None: none)."""
    if info is None:
        return None
    low: tuple[str, Any] | None = None
    high: tuple[str, Any] | None = None
    for m in info.metadata:
        if isinstance(m, at.Gt):
            low = ("<", m.gt)
        elif isinstance(m, at.Ge):
            low = ("≤", m.ge)
        elif isinstance(m, at.Lt):
            high = ("<", m.lt)
        elif isinstance(m, at.Le):
            high = ("≤", m.le)
    if low is None:
        return f"value {high[0]} {_num(high[1])}" if high else None
    if high is None:  # value ≥ 1 reads better than 1 ≤ value
        return f"value {'>' if low[0] == '<' else '≥'} {_num(low[1])}"
    return f"{_num(low[1])} {low[0]} value {high[0]} {_num(high[1])}"


_NAMED = re.compile(r"[\w.]+( \([^)]*\))?: ")


def format_validation_error(
    err: ValidationError,
    model: type[BaseModel] | None = None,
    flag_names: Mapping[str, str] | None = None,
) -> str:
    """One line per problem: ``dotted.key (--flag): message``; a number out of range adds
    ``got X (accepted: RANGE)`` from ``model``'s field. ``flag_names`` maps config keys to
    the flag (as typed) that sets them."""
    names = flag_names or {}
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        named = _NAMED.match(msg)
        if named and not named.group(1):  # a model-level check names its field itself
            inner = f"{loc}.{msg[: named.end() - 2]}" if loc else msg[: named.end() - 2]
            if inner in names:  # ``workload`` / ``rate: …`` → ``workload.rate (--rate): …``
                lines.append(f"{inner} ({names[inner]}): {msg[named.end() :]}")
                continue
        if not loc and named:
            lines.append(msg)
            continue
        key = _key_of(loc, names)
        label = f"{loc} ({names[key]})" if key else loc or "config"
        if e["type"] in RANGE_ERRORS:
            msg += f", got {e.get('input')!r}"
            rng = accepted_range(field_at(model, e["loc"])) if model is not None else None
            msg += f" (accepted: {rng})" if rng else ""
        lines.append(f"{label}: {msg}")
    return "\n".join(lines)


def _key_of(loc: str, names: Mapping[str, str]) -> str | None:
    """The longest prefix of ``loc`` that a flag sets (``tp.int`` → ``tp``)."""
    parts = loc.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in names:
            return key
    return None
