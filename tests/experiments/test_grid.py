"""Grid parsing, cell identities and seeds: typed values, stable ids, no ``hash()``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tidal.core.errors import ConfigError
from tidal.experiments.grid import (
    apply_cell,
    cell_id,
    cell_seed,
    cells,
    parse_grid,
    parse_grid_arg,
)


def test_grid_values_are_typed_like_yaml_scalars():
    key, values = parse_grid_arg("scheduler.token_budget=512, 2048")
    assert key == "scheduler.token_budget"
    assert values == [512, 2048]
    assert all(type(v) is int for v in values)
    assert parse_grid_arg("gpu=h100,l40s")[1] == ["h100", "l40s"]
    assert parse_grid_arg("workload.rate=0.5,inf")[1] == [0.5, "inf"]
    assert parse_grid_arg("fast_forward=true,false")[1] == [True, False]


@pytest.mark.parametrize("arg", ["scheduler.token_budget", "=1,2", "a..b=1", "gpu=h100,,l40s"])
def test_malformed_grid_arguments_name_the_field_and_the_fix(arg):
    with pytest.raises(ConfigError) as err:
        parse_grid_arg(arg)
    assert err.value.field == "grid"
    assert "KEY=V1,V2" in str(err.value)


def test_duplicate_values_and_empty_axes_are_refused():
    with pytest.raises(ConfigError, match="twice"):
        parse_grid(["gpu=h100,h100"])
    with pytest.raises(ConfigError, match="no values"):
        parse_grid([], {"gpu": []})


def test_cells_are_the_cartesian_product_last_key_fastest_and_args_override_yaml():
    grid = parse_grid(["b=3,4"], {"a": [1, 2], "b": [9]})
    assert cells(grid) == [
        {"a": 1, "b": 3},
        {"a": 1, "b": 4},
        {"a": 2, "b": 3},
        {"a": 2, "b": 4},
    ]


def test_apply_cell_sets_dotted_keys_and_merges_mappings_without_touching_the_base():
    base = {"gpu": "h100", "scheduler": {"batching": "mb", "max_seqs": 64}}
    out = apply_cell(
        base, {"scheduler": {"token_budget": 512}, "workload.rate": 2.0, "gpu": "h200"}
    )
    assert out == {
        "gpu": "h200",
        "scheduler": {"batching": "mb", "max_seqs": 64, "token_budget": 512},
        "workload": {"rate": 2.0},
    }
    assert base == {"gpu": "h100", "scheduler": {"batching": "mb", "max_seqs": 64}}


def test_cell_ids_are_readable_unique_and_independent_of_key_order():
    a = cell_id({"scheduler.token_budget": 512, "workload.rate": 2})
    b = cell_id({"workload.rate": 2, "scheduler.token_budget": 512})
    assert a == b
    assert a.startswith("token_budget=512_rate=2-")
    assert cell_id({"workload.rate": 2}) != cell_id({"workload.rate": 2.5})
    assert "/" not in cell_id({"trace": "azure/x.csv"})


def test_seed_policies():
    base = 7
    c1 = {"gpu": "h100", "workload.rate": 2}
    c2 = {"gpu": "l40s", "workload.rate": 2}
    c3 = {"gpu": "h100", "workload.rate": 4}
    # workload: same workload values → same seed (common random numbers across policies)
    assert cell_seed(base, c1) == cell_seed(base, c2) != cell_seed(base, c3)
    # per-cell: every cell its own seed; common: the base seed
    assert len({cell_seed(base, c, "per-cell") for c in (c1, c2, c3)}) == 3
    assert {cell_seed(base, c, "common") for c in (c1, c2, c3)} == {7}
    # no workload key in the cell → the base seed; an explicit seed key wins
    assert cell_seed(base, {"gpu": "h100"}) == 7
    assert cell_seed(base, {"seed": 3, "workload.rate": 2}) == 3
    # the base seed matters, seeds are valid config seeds
    assert cell_seed(8, c1) != cell_seed(7, c1)
    assert 0 <= cell_seed(base, c1, "per-cell") < 2**63
    with pytest.raises(ConfigError, match="seed_policy"):
        cell_seed(base, c1, "random")


def test_seeds_and_ids_do_not_depend_on_the_python_hash_seed():
    code = (
        "import json; from tidal.experiments.grid import cell_seed, cell_id;"
        "c = {'workload.rate': 2.5, 'gpu': 'h100', 'scheduler': {'batching': 'mb'}};"
        "print(json.dumps([cell_seed(1, c, 'per-cell'), cell_id(c)]))"
    )
    outs = []
    for hash_seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        proc = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        outs.append(json.loads(proc.stdout))
    assert outs[0] == outs[1]
