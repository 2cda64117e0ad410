"""Plain-text console output (issue 32 §10): the consoles interpret no markup, so a user's
value (a path, a config value, an error message quoting one) prints as given — ``[/x]`` is no
``MarkupError``, ``[red]`` swallows nothing, ``pip install 'tidal[serve]'`` keeps its extra.
Styled output is built as :class:`rich.text.Text` from (text, style) parts instead."""

from __future__ import annotations

from rich.markup import escape
from rich.text import Text

__all__ = ["escape", "styled"]


def styled(*parts: str | tuple[str, str]) -> Text:
    """``Text`` of plain strings and ``(text, style)`` pairs; nothing is parsed as markup."""
    return Text.assemble(*parts)
