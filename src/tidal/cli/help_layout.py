"""``--help`` at any terminal width: never a flag name cut short.

typer draws each command's options as a rich table whose cells end in "…" where a column is
too narrow — at 80 columns ``--tp,--tensor-par…`` and dozens of other flag names and vLLM
aliases were cut. Here the help tables' cells *fold* instead (a word too long for its column
continues on the next line) and each alias of a flag gets its own line (``--tp`` /
``--tensor-parallel-size``), so a name is cut only where a column is narrower than the name
itself. A command's line in ``tidal --help``'s list is its docstring's first paragraph as one
paragraph (typer kept the docstring's line breaks), and a docstring's ````literal```` prints
as ``literal``. Installed once, on typer's help renderer
only (``typer.rich_utils``); nothing else of rich or typer changes."""

from __future__ import annotations

import inspect
import re
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


_typer_command_help = rich_utils._make_command_help


def _command_help(*, help_text: str, markup_mode: Any) -> Any:
    """A command's line in a group's list (``tidal --help``): the first paragraph of its
    docstring as one paragraph. typer keeps the docstring's single line breaks in rich markup
    mode, which cut "… on a trace or a / synthetic workload." into two lines mid-sentence."""
    first, *rest = inspect.cleandoc(help_text).split("\n\n")
    if not first.startswith("\b"):
        first = " ".join(first.split("\n"))
    return _typer_command_help(help_text="\n\n".join([first, *rest]), markup_mode=markup_mode)


_typer_rich_text = rich_utils._make_rich_text
_LITERAL = re.compile(r"``([^`]+)``")


def _rich_text(*, text: str, style: str = "", markup_mode: Any) -> Any:
    """Help text as typer renders it, a docstring's reStructuredText literal ````x```` shown
    as ``x`` (the docstrings document the code too; the help is read in a terminal)."""
    text = _LITERAL.sub(r"\1", text)
    return _typer_rich_text(text=text, style=style, markup_mode=markup_mode)


def install() -> None:
    """Make typer's help tables :class:`FoldingTable` s, and a command's line in a group's list
    one paragraph (idempotent)."""
    if getattr(rich_utils, "Table", None) is Table:
        rich_utils.Table = FoldingTable  # type: ignore[misc]
    rich_utils._make_command_help = _command_help  # type: ignore[assignment]
    rich_utils._make_rich_text = _rich_text  # type: ignore[assignment]
