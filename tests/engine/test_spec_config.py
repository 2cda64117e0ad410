"""``--speculative-config``: vLLM's keys, the acceptance model's validation and closed forms."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidal.core.errors import ConfigError
from tidal.engine.spec_config import (
    SpeculativeConfig,
    expected_tokens,
    expected_tokens_uniform,
    parse_speculative_config,
)


@given(st.floats(0.0, 0.999), st.integers(1, 16))
def test_one_rate_closed_form_equals_the_sum(alpha: float, k: int) -> None:
    assert expected_tokens([alpha] * k) == pytest.approx(expected_tokens_uniform(alpha, k))


def test_hand_derived_values() -> None:
    # α = 0.5, k = 2: 1 + 0.5 + 0.25; per-position [0.8, 0.5]: 1 + 0.8 + 0.4.
    assert expected_tokens_uniform(0.5, 2) == 1.75
    assert expected_tokens([0.8, 0.5]) == pytest.approx(2.2)
    assert expected_tokens_uniform(1.0, 3) == 4.0


def test_defaults_and_required_rates() -> None:
    assert SpeculativeConfig(method="eagle3", num_speculative_tokens=3).alphas() == (0.7,) * 3
    assert SpeculativeConfig(method="mtp", num_speculative_tokens=1).alphas() == (0.85,)
    with pytest.raises(ConfigError, match="acceptance_rate"):
        SpeculativeConfig(method="mtp", num_speculative_tokens=2).alphas()
    with pytest.raises(ConfigError, match="acceptance_rate"):
        SpeculativeConfig(method="ngram", num_speculative_tokens=3).alphas()
    rates = [0.9, 0.6, 0.3]
    cfg = SpeculativeConfig(method="ngram", num_speculative_tokens=3, acceptance_rate=rates)
    assert cfg.alphas() == (0.9, 0.6, 0.3)


def test_ngram_lookup_defaults_as_vllm() -> None:
    cfg = SpeculativeConfig(method="ngram", num_speculative_tokens=2)
    assert (cfg.prompt_lookup_min, cfg.prompt_lookup_max) == (5, 5)
    cfg = SpeculativeConfig(method="ngram", num_speculative_tokens=2, prompt_lookup_max=3)
    assert (cfg.prompt_lookup_min, cfg.prompt_lookup_max) == (3, 3)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("{", "--speculative-config"),
        ("[1]", "--speculative-config"),
        ('{"method": "medusa", "num_speculative_tokens": 2}', "--speculative-config.method"),
        ('{"method": "eagle3", "num_speculative_tokens": 0}', "num_speculative_tokens"),
        ('{"method": "eagle3", "num_speculative_tokens": 2, "acceptance_rate": 1.5}', "rate"),
        ('{"method": "eagle", "num_speculative_tokens": 2, "acceptance_rate": [0.5]}', "rates"),
        ('{"method": "draft_model", "num_speculative_tokens": 2}', "--speculative-config"),
        ('{"method": "eagle3", "num_speculative_tokens": 2, "k": 1}', "k"),
    ],
)
def test_bad_json_names_the_field(text: str, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_speculative_config(text)
    assert err.value.field.startswith("--speculative-config")
    assert field in str(err.value)


def test_the_json_for_vllm_has_no_acceptance_rate() -> None:
    cfg = parse_speculative_config(
        '{"method": "eagle3", "num_speculative_tokens": 3, "acceptance_rate": 0.6, "model": "m"}'
    )
    out = json.loads(cfg.vllm_json())
    assert out == {"method": "eagle3", "num_speculative_tokens": 3, "model": "m"}
