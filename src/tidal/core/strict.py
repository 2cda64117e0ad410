"""The base of every typed config: unknown keys refused, integers and booleans taken strictly.

Pydantic's lax mode turns ``max_seqs: true`` into 1 and ``fast_forward: 1`` into True. Here an
``int`` field (also ``int | None``) accepts only an integer, or an integral float such as
``1e3``, never a bool or a string; a ``bool`` field (also ``bool | Literal[...]``) accepts only
``true``/``false`` (or one of the literals). Floats stay lax, so ``rate: inf`` keeps working.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


def _members(annotation: Any) -> tuple[Any, ...]:
    """The alternatives of a union (``X | None`` → ``(X, NoneType)``), else ``(annotation,)``."""
    origin = typing.get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        return typing.get_args(annotation)
    return (annotation,)


def _kind(annotation: Any) -> str | None:
    """``int`` or ``bool`` when the field is one of those (optionally with None or literals)."""
    rest = [
        m
        for m in _members(annotation)
        if m is not type(None) and typing.get_origin(m) is not Literal
    ]
    if rest == [bool]:
        return "bool"
    if rest == [int]:
        return "int"
    return None


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _strict_scalars(cls, value: Any, info: ValidationInfo) -> Any:
        if info.field_name is None or value is None:
            return value
        kind = _kind(cls.model_fields[info.field_name].annotation)
        if kind == "int" and (isinstance(value, bool | str) or _non_integral(value)):
            raise ValueError(f"expected an integer, got {value!r}")
        if kind == "bool" and not isinstance(value, bool | str):
            raise ValueError(f"expected true or false, got {value!r}")
        if kind == "bool" and isinstance(value, str) and not _is_literal(cls, info, value):
            raise ValueError(f"expected true or false, got {value!r}")
        return value


def _non_integral(value: Any) -> bool:
    return isinstance(value, float) and not value.is_integer()


def _is_literal(cls: type[BaseModel], info: ValidationInfo, value: str) -> bool:
    assert info.field_name is not None
    annotation = cls.model_fields[info.field_name].annotation
    return any(
        typing.get_origin(m) is Literal and value in typing.get_args(m)
        for m in _members(annotation)
    )
