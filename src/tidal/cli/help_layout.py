"""``--help`` at any terminal width: never a flag name cut short.

typer draws each command's options as a rich table whose cells end in "…" where a column is
too narrow — at 80 columns ``--tp,--tensor-par…`` and dozens of other flag names and vLLM
aliases were cut. Here the help tables' cells *fold* instead (a word too long for its column
continues on the next line) and each alias of a flag gets its own line (``--tp`` /
``--tensor-parallel-size``), so a name is cut only where a column is narrower than the name
itself. Installed once, on typer's help renderer only (``typer.rich_utils``); nothing else
of rich or typer changes."""

from __future__ import annotations

from typing import Any

import typer.rich_utils as rich_utils
from rich.table import Table
from rich.text import Text


class FoldingTable(Table):
    """A rich ``Table`` for typer's help: in an options table (typer's rows end with long
    names, short names, negative long names, negative short names, type, help) the names
    never wrap nor shrink — one name per line, the ``--no-…`` form under its flag — and every
    other cell folds a word too long for its column rather than ellipsize it."""

    def add_row(self, *renderables: Any, **kwargs: Any) -> None:
        cells = list(renderables)
        options = len(cells) >= 6 and _is_names(cells[-6])
        if options:
            cells[-6] = _names(cells[-6], cells[-4])
            cells[-5] = _names(cells[-5], cells[-3])
            cells[-4] = cells[-3] = Text("")
        while len(self.columns) < len(cells):
            names = options and len(cells) - 6 <= len(self.columns) < len(cells) - 2
            self.add_column(highlight=self.highlight, overflow="fold", no_wrap=names)
        super().add_row(*(_folding(c) for c in cells), **kwargs)


def _is_names(cell: Any) -> bool:
    return isinstance(cell, Text) and (not cell.plain or cell.plain.startswith("-"))


def _names(names: Any, negative: Any) -> Any:
    """Each comma-joined name on a line of its own, then the negative forms (styles kept)."""
    if not isinstance(names, Text) or not isinstance(negative, Text):
        return names
    lines = [*names.split(","), *(negative.split(",") if negative.plain else [])]
    return Text("\n").join(line for line in lines if line.plain)


def _folding(cell: Any) -> Any:
    """Texts inside a help cell (typer's ``Columns`` of help, default, env var) fold."""
    for item in getattr(cell, "renderables", ()):
        if isinstance(item, Text) and item.overflow is None:
            item.overflow = "fold"
    return cell


def install() -> None:
    """Make typer's help tables :class:`FoldingTable` s (idempotent)."""
    if getattr(rich_utils, "Table", None) is Table:
        rich_utils.Table = FoldingTable  # type: ignore[misc]
