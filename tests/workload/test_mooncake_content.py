"""Mooncake ``hash_ids`` as prompt content (issue 14): segments of ``hash_block_tokens``."""

from __future__ import annotations

import json

import pytest

from tidal.core.errors import TraceError
from tidal.workload.traces import load_mooncake


def write(tmp_path, rows) -> str:
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(p)


def test_hash_ids_become_segments_in_arrival_order(tmp_path):
    rows = [
        {"timestamp": 5, "input_length": 1100, "output_length": 3, "hash_ids": [1, 2, 3]},
        {"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 9]},
    ]
    rs = load_mooncake(write(tmp_path, rows), hash_block_tokens=512)
    c = rs.content
    assert c is not None
    first = c.block_content(0, 0)  # the request at t = 0: ids 1, 9 (512 + 88 tokens)
    second = c.block_content(1, 1)
    assert first.ends[-1] == 600
    assert second.ends[-1] == 1100
    # id 1 (with its 512 tokens) is shared: the same chain hash at the same position
    assert c.hashes[c.offset[0]] == c.hashes[c.offset[1]]


def test_a_wrong_number_of_ids_names_the_field_and_the_fix(tmp_path):
    rows = [{"timestamp": 0, "input_length": 1100, "output_length": 3, "hash_ids": [1, 2]}]
    with pytest.raises(TraceError, match=r"hash_ids.*hash_block_tokens"):
        load_mooncake(write(tmp_path, rows), hash_block_tokens=512)


def test_a_trace_without_ids_has_no_content(tmp_path):
    rows = [{"timestamp": 0, "input_length": 10, "output_length": 3}]
    assert load_mooncake(write(tmp_path, rows), hash_block_tokens=512).content is None
