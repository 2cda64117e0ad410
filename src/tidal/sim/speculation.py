"""Speculative decoding in a simulated instance: the step model and the acceptance draws that
``speculative`` (vLLM's ``--speculative-config``) asks for.

:func:`build_speculation` wraps the instance's step model in
:class:`~tidal.hardware.spec_perf.SpecPerfModel` (verification of k + 1 rows plus drafting) and
makes the seeded :class:`~tidal.engine.acceptance.AcceptanceModel` that the engine state's
speculative decode pool draws from. Its key is child 5 of the run seed's ``SeedSequence``
(children 0–3 are ``run.SEED_STREAMS``, 4 the warm-up phase's), so the draws depend on the run
seed and nothing else.
"""

from __future__ import annotations

import numpy as np

from tidal.core.errors import ConfigError
from tidal.engine.acceptance import AcceptanceModel
from tidal.engine.spec_config import SpeculativeConfig
from tidal.hardware.calibration import build_perf_model
from tidal.hardware.gpus import GPUSpec, get_gpu
from tidal.hardware.models import ModelSpec, get_model
from tidal.hardware.perf import PerfModel
from tidal.hardware.spec_perf import SpecPerfModel
from tidal.sim.config import SimulationConfig
from tidal.workload.base import RequestSet

SEED_CHILD = 5
"""Index of the speculation stream among the run seed's ``SeedSequence`` children."""

DRAFT_LAYERS = {"eagle3": 1, "eagle": 1, "mtp": 1, "deepseek_mtp": 1}
"""Decoder layers of one draft pass: EAGLE/EAGLE-3 heads are one decoder layer; DeepSeek-V3's
MTP module is one transformer block (chained k times by vLLM)."""


def announce_requests(scheduler: object, reqs: RequestSet) -> None:
    """Tell a speculative instance's acceptance draws its requests' lengths (ids are indices
    of ``reqs``; a plain request joins the decode pool with its prompt computed and
    ``output_len − 1`` tokens left): its draw blocks then draw each row about what it needs
    and precompute the first joins' levels (:meth:`AcceptanceModel.expect`). Outputs do not
    change; a request that joins otherwise takes the general path."""
    pool = getattr(getattr(scheduler, "state", None), "pool", None)
    acc = getattr(pool, "acceptance", None)
    if isinstance(acc, AcceptanceModel):
        acc.expect(reqs.prompt_len, reqs.output_len - 1)


def speculation_key(seed: int) -> int:
    """The acceptance draws' key for the run seed ``seed``."""
    child = np.random.SeedSequence(seed).spawn(SEED_CHILD + 1)[SEED_CHILD]
    return int(child.generate_state(1, np.uint64)[0])


def build_speculation(
    cfg: SimulationConfig, perf: PerfModel
) -> tuple[PerfModel, AcceptanceModel | None]:
    """``(step model, acceptance model)`` of the configured instance: ``(perf, None)`` when
    speculation is off."""
    spec = cfg.speculative
    if spec is None:
        return perf, None
    target = (cfg.model_spec(), get_gpu(cfg.gpu), cfg.tp)
    return speculation_for(spec, perf, speculation_key(cfg.seed), target, cfg.perf_model,
                           cfg.perf_host)  # fmt: skip


def speculation_for(
    spec: SpeculativeConfig,
    perf: PerfModel,
    key: int,
    target: tuple[ModelSpec, GPUSpec, int],
    perf_model: str,
    perf_host: str,
) -> tuple[PerfModel, AcceptanceModel]:
    """``spec`` on an engine of ``target`` (model, GPU, TP) whose step model is ``perf``: the
    wrapped step model (verification of k + 1 rows plus drafting: a draft model's own step
    model, an EAGLE/MTP head as a fraction of the target's layers, or the host's n-gram
    lookup) and the acceptance draws under ``key``."""
    k = spec.num_speculative_tokens
    accept = AcceptanceModel(spec.alphas(), key)
    model, gpu, tp = target
    if spec.method == "ngram":
        return SpecPerfModel(perf, k, spec.method), accept
    if spec.method == "draft_model":
        assert spec.model is not None  # validated
        try:
            draft_spec = get_model(spec.model)
        except (ConfigError, KeyError, ValueError) as err:
            raise ConfigError(
                "speculative.model", f"unknown draft model {spec.model!r} ({err})",
                "use a catalog id (tidal models) or a config.json path",
            ) from None  # fmt: skip
        draft_tp = spec.draft_tensor_parallel_size or tp
        draft = build_perf_model(perf_model, draft_spec, gpu, draft_tp, host=perf_host)
        return SpecPerfModel(perf, k, spec.method, draft, 1.0), accept
    frac = DRAFT_LAYERS[spec.method] / model.num_layers
    return SpecPerfModel(perf, k, spec.method, perf, frac), accept


def base_perf(perf: PerfModel) -> PerfModel:
    """The target's own step model under a speculation wrapper (what the summary names)."""
    return perf.base if isinstance(perf, SpecPerfModel) else perf
