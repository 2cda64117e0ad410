"""``--help`` at 80 columns: every flag name and alias of every command printed in full, no
cell cut with "…" (issue 31: 45 lines were, vLLM's aliases among them)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from rich.cells import cell_len
from typer.testing import CliRunner

from tidal.cli import app


def _commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command's path, groups included (typer's own click: a group has ``commands``)."""
    out = [path]
    if hasattr(group, "commands"):
        for name, cmd in sorted(group.commands.items()):
            out += _commands(cmd, (*path, name))
    return out


ROOT = typer.main.get_command(app)
COMMANDS = _commands(ROOT)


def _command(path: tuple[str, ...]) -> Any:
    cmd = ROOT
    for name in path:
        cmd = cmd.commands[name]
    return cmd


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "tidal")
def test_help_at_80_columns_names_every_flag_in_full(path: tuple[str, ...]) -> None:
    res = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    assert max(cell_len(line) for line in res.output.splitlines()) <= 80
    cmd = _command(path)
    texts = [cmd.help or "", *(getattr(p, "help", None) or "" for p in cmd.params)]
    assert res.output.count("…") <= sum(t.count("…") for t in texts), "a cell was cut"
    words = set(re.findall(r"(?<![\w-])-{1,2}[\w-]+", res.output))
    for param in cmd.params:
        for name in [*param.opts, *param.secondary_opts]:
            if name.startswith("-"):
                assert name in words, f"{' '.join(path)} --help at 80 columns: {name} not shown"


def test_the_command_tree_is_walked() -> None:
    """The parametrization above covers the groups' subcommands, not just the top level."""
    assert ("simulate",) in COMMANDS
    assert any(len(p) == 2 for p in COMMANDS)
