"""Grids over dotted config keys: parsing, cartesian cells, cell identities and per-cell seeds.

A grid maps dotted keys of :class:`~tidal.sim.config.SimulationConfig` (``scheduler.token_budget``,
``workload.rate``, ``gpu``) to lists of values; its cells are the cartesian product, in the
order the keys were given (the last key varies fastest). A value that is a mapping is merged into
the mapping at its key, so ``scheduler: [{batching: mb, token_budget: 512}, {batching: mb}]``
varies several fields together.

Identity and seeds are functions of a *canonical encoding* of the cell — the JSON of its
``(key, value)`` pairs sorted by key, with sorted mapping keys and no whitespace — so they do not
depend on the order the keys were given, on the process, or on ``PYTHONHASHSEED``:

* ``cell_id`` = a readable slug of the values + the first 8 hex digits of SHA-256(encoding);
* seeds = the first 63 bits of ``SeedSequence(base_seed, spawn_key=W)``'s state, where W are
  the first four 32-bit words of SHA-256 of the encoding of the cell's *seed-relevant* values
  (docs/DESIGN.md §3: seeds only from numpy ``SeedSequence``, never ``hash()``). Which values are
  seed-relevant is the seed policy (:data:`SEED_POLICIES`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import yaml

from tidal.core.errors import ConfigError

Grid = dict[str, list[Any]]
SEED_POLICIES = ("workload", "per-cell", "common")
"""``workload`` (default): the seed is derived from the base seed and the cell's ``workload.*``
values, so cells that differ only in hardware or policy replay the same sampled workload
(common random numbers: their differences are the policy's, not the sample's), while each
workload setting (a rate, a length distribution) gets its own independent sample;
``per-cell``: derived from every value of the cell (independent samples everywhere);
``common``: every cell uses the base seed."""


def parse_value(text: str) -> Any:
    """One grid value as YAML reads a scalar: ``512`` → int, ``0.5`` → float, ``h100`` → str,
    ``true`` → bool; ``inf`` stays a string (pydantic turns it into a float where one is due)."""
    text = text.strip()
    if not text:
        raise ValueError("empty value")
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return text if value is None else value


def parse_grid_arg(arg: str) -> tuple[str, list[Any]]:
    """``key=v1,v2,...`` → ``(key, [v1, v2, ...])``."""
    key, sep, vals = arg.partition("=")
    key = key.strip()
    fix = "write KEY=V1,V2,... with a dotted config key, e.g. scheduler.token_budget=512,2048"
    if not sep or not key or not vals.strip():
        raise ConfigError("grid", f"{arg!r} is not KEY=V1,V2,...", fix)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", key):
        raise ConfigError("grid", f"{key!r} is not a dotted config key", fix)
    try:
        values = [parse_value(v) for v in vals.split(",")]
    except ValueError:
        raise ConfigError("grid", f"{arg!r} has an empty value", fix) from None
    return key, values


def parse_grid(args: Iterable[str], base: Mapping[str, Iterable[Any]] | None = None) -> Grid:
    """Merge ``--grid`` arguments over a grid given in YAML (same key: the argument wins)."""
    grid: Grid = {}
    for key, values in (base or {}).items():
        if isinstance(values, str | bytes) or not isinstance(values, Iterable):
            raise ConfigError(f"grid.{key}", "must be a list of values", "e.g. [512, 2048]")
        grid[str(key)] = list(values)
    for arg in args:
        key, values = parse_grid_arg(arg)
        grid[key] = values
    for key, values in grid.items():
        if not values:
            raise ConfigError(f"grid.{key}", "has no values", "give at least one")
        encoded = [canonical(v) for v in values]
        if len(set(encoded)) != len(encoded):
            raise ConfigError(f"grid.{key}", "lists a value twice", "remove the duplicate")
    return grid


def cells(grid: Grid) -> list[dict[str, Any]]:
    """The cartesian product, one ``{key: value}`` per cell (last key fastest)."""
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*grid.values())]


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``data[a][b][c] = value`` for ``a.b.c``; a mapping value is merged into a mapping."""
    keys = dotted.split(".")
    node = data
    for k in keys[:-1]:
        child = node.get(k)
        if not isinstance(child, dict):
            child = {}
            node[k] = child
        node = child
    last = keys[-1]
    if isinstance(value, Mapping) and isinstance(node.get(last), dict):
        merged = dict(node[last])
        for k, v in value.items():
            set_dotted(merged, str(k), v)
        node[last] = merged
    else:
        node[last] = _plain(value)


def apply_cell(base: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of ``base`` with every dotted key of the cell set."""
    data = json.loads(json.dumps(base))
    for key, value in values.items():
        set_dotted(data, key, value)
    return data


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value)) if isinstance(value, Mapping | list) else value


def canonical(value: Any) -> str:
    """Canonical JSON: sorted keys, no spaces; floats by ``repr`` (round-trip exact)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def encode_cell(values: Mapping[str, Any]) -> str:
    return canonical(sorted(values.items()))


def _digest(values: Mapping[str, Any]) -> bytes:
    return hashlib.sha256(encode_cell(values).encode()).digest()


def cell_id(values: Mapping[str, Any]) -> str:
    """``token_budget=512_rate=2-1a2b3c4d``: readable (values in sorted key order, so the id
    does not depend on the order the axes were given), filesystem-safe, unique by the hash."""
    parts = []
    for key, value in sorted(values.items()):
        text = value if isinstance(value, str) else canonical(value)
        parts.append(f"{key.rsplit('.', 1)[-1]}={text}")
    slug = re.sub(r"[^A-Za-z0-9._=+-]+", "", "_".join(parts))[:80] or "base"
    return f"{slug}-{_digest(values).hex()[:8]}"


def seed_values(values: Mapping[str, Any], policy: str) -> dict[str, Any]:
    """The values of a cell its seed depends on under ``policy``."""
    if policy == "per-cell":
        return dict(values)
    if policy == "workload":
        return {k: v for k, v in values.items() if k == "workload" or k.startswith("workload.")}
    if policy == "common":
        return {}
    raise ConfigError(
        "seed_policy", f"unknown value {policy!r}", f"valid: {', '.join(SEED_POLICIES)}"
    )


def cell_seed(base_seed: int, values: Mapping[str, Any], policy: str = "workload") -> int:
    """The run seed of a cell (see the module docstring). A ``seed`` key in the cell is used
    as given: it is how a grid asks for replicates. No seed-relevant value → the base seed."""
    if "seed" in values:
        return int(values["seed"])
    relevant = seed_values(values, policy)
    if not relevant:
        return int(base_seed)
    words = np.frombuffer(_digest(relevant)[:16], dtype="<u4").tolist()
    ss = np.random.SeedSequence(int(base_seed), spawn_key=tuple(words))
    return int(ss.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))
