"""Ranges of command-line arguments that no config model holds (issue 32 §7), declared once
as pydantic fields and checked before any work; a value outside is a named error."""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError

from tidal.core.errors import TidalError
from tidal.core.strict import StrictModel

MAX_SEQS_LIMIT = 1 << 20
"""Running requests no engine holds; past it a closed form's loops only burn memory."""


class ExplainArgs(StrictModel):
    """``tidal ebplus explain``."""

    prompt_len: float = Field(gt=0, le=1e7, allow_inf_nan=False)
    output_len: float = Field(gt=0, le=1e7, allow_inf_nan=False)
    concurrency: int | None = Field(default=None, ge=1, le=MAX_SEQS_LIMIT)
    tp: int = Field(default=1, ge=1, le=64)
    max_seqs: int = Field(default=1024, ge=1, le=MAX_SEQS_LIMIT)


def check_args(model: type[StrictModel], **values: Any) -> None:
    """Raise a :class:`TidalError` naming each argument outside ``model``'s ranges."""
    try:
        model.model_validate(values)
    except ValidationError as err:
        lines = [
            f"{'.'.join(str(p) for p in e['loc']).replace('_', '-')}: {e['msg'].lower()}"
            f" (got {e.get('input')!r})"
            for e in err.errors()
        ]
        raise TidalError("; ".join(lines)) from None
