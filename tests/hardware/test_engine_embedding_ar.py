"""The embedding's all-reduce at TP > 1 (vLLM's ``VocabParallelEmbedding``): one all-reduce of
the T × H embedding output a step, beside the layers' 2L (engine step model)."""

from __future__ import annotations

import pytest

from tidal.hardware.engine_perf import EngineDeployment, EnginePerfModel
from tidal.hardware.engine_tables import MOE_DISTRIBUTIONS, allreduce_us
from tidal.hardware.gpus import get_gpu
from tidal.hardware.interp import Curve
from tidal.hardware.models import get_model

M = get_model("llama-3.1-70b")


def _deployment(tp: int, dp: int = 1) -> EngineDeployment:
    perf = EnginePerfModel(M, get_gpu("b200"), tp)
    return EngineDeployment(perf.tables, M, tp, False, MOE_DISTRIBUTIONS[0], perf.fb, dp)


def _gather(ed: EngineDeployment) -> list[float]:
    return [1e6 * (ed.fb._emb0 + ed.fb._emb1 * t) for t in ed.tokens]


def test_tp1_embeds_without_a_collective() -> None:
    ed = _deployment(1)
    assert ed.embedding() == _gather(ed)


@pytest.mark.parametrize("tp", [2, 8])
def test_tp_adds_one_all_reduce_of_the_embedding_output(tp: int) -> None:
    ed = _deployment(tp)
    pts = allreduce_us(ed.ts, tp)
    assert pts is not None
    ar = Curve(*pts)
    h = M.hidden_size * 2  # bf16 activations
    for t, e, g in zip(ed.tokens, ed.embedding(), _gather(ed), strict=True):
        assert e - g == pytest.approx(ar.at(t * h), rel=1e-12)
    # at 8,192 tokens the message is 8192·8192·2 = 134 MB: the same price as each of the
    # layers' 2L all-reduces of the step (MeasuredPerfModel's curve of the same rows)
    perf = EnginePerfModel(M, get_gpu("b200"), tp)
    i = ed.tokens.index(8192)
    assert perf._ar is not None
    extra = ed.embedding()[i] - _gather(ed)[i]
    assert extra == pytest.approx(1e6 * perf._ar.at(8192 * h), rel=0.02)


def test_a_data_parallel_rank_all_reduces_its_own_tokens() -> None:
    one, two = _deployment(2), _deployment(2, dp=2)
    assert one.tokens == two.tokens  # the per-rank grid
    assert two.embedding() == one.embedding()
