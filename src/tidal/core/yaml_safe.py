"""YAML read with a bound on its expanded size (issue 32 §9): aliases make a few hundred
bytes stand for gigabytes once expanded (a "billion laughs"). ``yaml.safe_load`` shares the
aliased objects, so loading is cheap, but any copy that expands them — a JSON round trip,
``model_dump``, a sweep cell — is not. The document's node graph is composed first and its
size with every alias expanded is counted (memoized per node, so counting is linear in the
graph); a document beyond :data:`MAX_EXPANDED_NODES` is refused before it is constructed.

Nesting is bounded too: PyYAML's scanner spends time quadratic in the depth of flow brackets
(``[[[[…``: 3,000 levels take seconds, a 16 MiB file of them hours) and its composer recurses
once per level (a ``RecursionError`` past ~1,000). A document nested deeper than
:data:`MAX_DEPTH` is refused before PyYAML reads it (found by tests/cli/test_fuzz_flags.py)."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tidal.core.errors import ConfigError

MAX_EXPANDED_NODES = 1_000_000
"""Scalars, sequences and mappings counted with aliases expanded (a config has hundreds)."""
MAX_DEPTH = 64
"""Levels of ``[``/``{`` nesting (a config has three or four)."""
_BRACKET = re.compile(r"[\[\]{}]")


def bracket_depth(text: str, limit: int = MAX_DEPTH) -> int:
    """The deepest nesting of ``[``/``{`` in ``text``, counted over the raw characters (a
    bracket inside a quoted string counts too: an over-estimate, never an under-estimate of
    the flow depth PyYAML will meet); counting stops past ``limit``."""
    depth = deepest = 0
    for m in _BRACKET.finditer(text):
        if m.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > limit:
                break
        else:
            depth = max(depth - 1, 0)
    return deepest


def expanded_nodes(root: yaml.Node | None, limit: int = MAX_EXPANDED_NODES) -> int:
    """Nodes of ``root`` with every alias expanded, counting stops past ``limit``."""
    sizes: dict[int, int] = {}
    order: list[tuple[yaml.Node, bool]] = [(root, False)] if root is not None else []
    on_path: set[int] = set()
    while order:
        node, done = order.pop()
        key = id(node)
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        if done:
            on_path.discard(key)
            sizes[key] = min(limit + 1, 1 + sum(sizes[id(c)] for c in children))
            continue
        if key in sizes:
            continue
        if key in on_path:  # a recursive alias: infinite once expanded
            return limit + 1
        on_path.add(key)
        order.append((node, True))
        order.extend((c, False) for c in children if id(c) not in sizes)
    return sizes.get(id(root), 0) if root is not None else 0


def safe_load_bounded(text: str, where: str, limit: int = MAX_EXPANDED_NODES) -> Any:
    """``yaml.safe_load(text)``, refusing a document larger than ``limit`` nodes expanded."""
    if bracket_depth(text) > MAX_DEPTH:
        raise ConfigError(
            "config",
            f"{where}: nested more than {MAX_DEPTH} levels of [ or {{",
            "a config nests a few levels: write the values out flat",
        )
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:  # block nesting (indentation) deep enough to exhaust the stack
        raise ConfigError(
            "config", f"{where}: nested too deeply to read", "a config nests a few levels"
        ) from None
    n = expanded_nodes(root, limit)
    if n > limit:
        raise ConfigError(
            "config",
            f"{where}: its aliases expand to more than {limit:,} YAML nodes (an alias bomb, "
            "or a recursive alias)",
            "write the values out, or use fewer nested aliases",
        )
    return yaml.safe_load(text)
