"""The benchmark's datasets and flags, without a server: lengths, ShareGPT parsing, goodput."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tidal.core.errors import ConfigError
from tidal.measure.dataset import build_requests
from tidal.measure.results import parse_goodput


def _build(name, n=50, **kw):
    args = {
        "dataset_path": None,
        "input_len": 100,
        "output_len": 20,
        "range_ratio": 0.0,
        "sharegpt_output_len": None,
        "chat": False,
    }
    args.update(kw)
    return build_requests(name, n, 0, **args)


def test_random_lengths_lie_in_the_range_ratio_band():
    reqs = _build("random", n=400, range_ratio=0.25)
    ins = np.array([r.prompt_len for r in reqs])
    outs = np.array([r.output_len for r in reqs])
    assert ins.min() >= 75
    assert ins.max() <= 125
    assert outs.min() >= 15
    assert outs.max() <= 25
    assert all(len(r.prompt) == r.prompt_len for r in reqs)  # id prompts: exact lengths
    assert all(0 <= t < 256 for r in reqs for t in r.prompt)
    fixed = _build("random", range_ratio=0.0)
    assert {r.prompt_len for r in fixed} == {100}
    chat = _build("random", chat=True)
    assert all(isinstance(r.prompt, str) and len(r.prompt.split()) == 100 for r in chat)


def test_sharegpt_takes_the_first_human_turn_and_the_replys_length(tmp_path):
    p = tmp_path / "sg.json"
    data = [
        {
            "conversations": [
                {"from": "human", "value": "a" * 40},
                {"from": "gpt", "value": "b" * 80},
            ]
        },
        {"conversations": [{"from": "human", "value": "only one turn"}]},
        {"conversations": [{"from": "human", "value": "c" * 8}, {"from": "gpt", "value": "d" * 4}]},
    ]
    p.write_text(json.dumps(data))
    reqs = _build("sharegpt", n=10, dataset_path=p)
    assert sorted((r.prompt, r.output_len) for r in reqs) == [("a" * 40, 20), ("c" * 8, 1)]
    fixed = _build("sharegpt", n=10, dataset_path=p, sharegpt_output_len=7)
    assert {r.output_len for r in fixed} == {7}
    p.write_text("[]")
    with pytest.raises(ConfigError, match="no conversation"):
        _build("sharegpt", dataset_path=p)
    with pytest.raises(ConfigError, match="dataset-path"):
        _build("sharegpt")


def test_goodput_slos_are_milliseconds_and_bad_ones_are_named():
    assert parse_goodput(["ttft:500", "tpot:50 e2el:2000"]) == {
        "ttft": 0.5,
        "tpot": 0.05,
        "e2el": 2.0,
    }
    for bad in ("ttft", "ttft:-1", "latency:5", "tpot:x"):
        with pytest.raises(ConfigError, match="goodput"):
            parse_goodput([bad])
