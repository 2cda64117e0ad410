"""Sampling parameters: seed range, top-k, min_tokens (each checked against a hand-built case)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tidal.runtime.sampling import SEED_MAX, SEED_MIN, SamplingParams, sample  # noqa: E402

pytestmark = pytest.mark.engine


@pytest.mark.parametrize("seed", [SEED_MAX + 1, SEED_MIN - 1, 1180591620717411303424])
def test_a_seed_outside_int64_is_refused_where_the_params_are_built(seed):
    """Before: the seed reached torch.Generator.manual_seed in the engine thread, whose
    OverflowError killed the thread (every later request got 503)."""
    with pytest.raises(ValueError, match="seed"):
        SamplingParams(1.0, seed=seed)


@pytest.mark.parametrize("seed", [SEED_MIN, -1, 0, SEED_MAX])
def test_every_int64_seed_seeds_a_generator(seed):
    p = SamplingParams(1.0, seed=seed)
    g = torch.Generator().manual_seed(p.seed)
    logits = torch.zeros(1, 50)
    a = sample(logits, [p], [g])
    b = sample(logits, [p], [torch.Generator().manual_seed(p.seed)])
    assert a == b  # same seed, same draw


@settings(max_examples=40, deadline=None)
@given(k=st.integers(1, 12), seed=st.integers(0, 2**32))
def test_top_k_never_samples_outside_the_k_largest_logits(k, seed):
    logits = torch.linspace(0.0, 3.0, 16).flip(0).unsqueeze(0)  # token i has the i-th largest
    p = SamplingParams(2.0, seed=seed, top_k=k)
    g = torch.Generator().manual_seed(seed)
    draws = [sample(logits, [p], [g])[0] for _ in range(20)]
    assert all(t < k for t in draws)


def test_top_k_one_is_greedy_and_zero_or_minus_one_keep_every_token():
    logits = torch.tensor([[0.1, 2.0, 1.9, 1.95]])
    g = torch.Generator().manual_seed(0)
    assert {sample(logits, [SamplingParams(2.0, seed=0, top_k=1)], [g])[0] for _ in range(30)} == {
        1
    }
    for k in (0, -1):
        g = torch.Generator().manual_seed(0)
        seen = {sample(logits, [SamplingParams(2.0, seed=0, top_k=k)], [g])[0] for _ in range(200)}
        assert seen == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="top_k"):
        SamplingParams(1.0, top_k=-2)


def test_min_tokens_masks_the_stop_tokens_until_reached_greedy_and_sampled():
    # token 3 (the "EOS") is by far the most likely: it must not appear before min_tokens
    logits = torch.tensor([[0.0, 1.0, 0.5, 9.0], [0.0, 1.0, 0.5, 9.0]])
    greedy = SamplingParams(0.0, min_tokens=2, suppress_ids=(3,))
    hot = SamplingParams(1.0, seed=1, min_tokens=2, suppress_ids=(3,))
    g = torch.Generator().manual_seed(1)
    for n in (0, 1):
        draws = [sample(logits, [greedy, hot], [None, g], [n, n]) for _ in range(100)]
        assert all(d[0] == 1 for d in draws)  # greedy: the best token that is not EOS
        assert all(d[1] != 3 for d in draws)
    assert sample(logits, [hot], [g], [2]) == [3]  # reached: EOS is back (p ≈ 0.9995)
    assert sample(logits, [greedy], [None], [2])[0] == 3  # reached: EOS is back
    assert greedy.is_default_greedy is False
    assert SamplingParams().is_default_greedy
