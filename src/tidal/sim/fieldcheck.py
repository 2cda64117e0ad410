"""One config value checked against its field's declared type and range (issue 32 §7): the
ranges are declared once, on the config models, and a value that reaches a config by another
road (a ``tidal plan`` search axis) is held to them before any work, instead of making an
option that is silently never simulated (``--token-budget 0``)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from tidal.core.errors import ConfigError
from tidal.core.validation import accepted_range, model_of
from tidal.sim.config import SimulationConfig


def field_info(key: str) -> FieldInfo | None:
    """The :class:`FieldInfo` of dotted ``key`` of the simulation config (None: not a field)."""
    model: type[BaseModel] | None = SimulationConfig
    info = None
    for part in key.split("."):
        if model is None or part not in model.model_fields:
            return None
        info = model.model_fields[part]
        model = model_of(info.annotation)
    return info


def check_field_value(key: str, value: Any, field: str | None = None) -> None:
    """Refuse ``value`` for ``key`` when its field's type or range refuses it."""
    info = field_info(key)
    if info is None or model_of(info.annotation) is not None:
        return
    form: Any = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
    adapter: TypeAdapter[Any] = TypeAdapter(form)
    try:
        adapter.validate_python(value)
    except ValidationError as err:
        msg = "; ".join(e["msg"] for e in err.errors())
        rng = accepted_range(info)
        raise ConfigError(
            field or key, f"{value!r}: {msg}" + (f" (accepted: {rng})" if rng else "")
        ) from None
