"""Knobs of the exclusive-batching policies ``eb`` and ``ebplus`` (YAML: ``scheduler.eb``), in
seven groups: ``threshold`` (θ and k, Algorithm 1, §3.1), ``bound`` (what keeps N within the KV
cache, §2.5, and EB⁺'s MB mode's margin), ``phase`` (the phase machine, §3.2), ``demand``
(EB⁺'s demand EMA N_obs and its filters, §3.3), ``selector`` (EB⁺'s crossover test and its
MB mode, §3.3) and ``cost`` (how the crossover prices the two policies).

Defaults follow the authors' scheduler (``docs/research/ebplus.md`` §3.4) except ``delta``
(1e-6 s/token), ``n_bound``/``mb_cap`` (``forecast``), ``surge_n`` (``demand``),
``cold_reserve`` (0.5), ``forecast_recent`` (100), ``crossover_lhs`` (``steps``) and
``ebb_factor`` (2); ``preset: reference`` restores the paper's forms (:data:`REFERENCE`). Why
each default differs, with the measurements behind it: ``docs/design/eb-defaults.md``.

Flat keys (``scheduler.eb.delta``, as every config before the grouping) are read into their
group (:data:`GROUP_OF`); ``mb_memory_safe: true`` reads as ``selector.mb_cap: n_hat``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from tidal.core.strict import StrictModel


class _Group(StrictModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ThresholdOptions(_Group):
    """The online threshold θ̂ and fixed-k switch (Algorithm 1, §3.1) and their estimator."""

    theta_cold: float = Field(default=0.70, gt=0, lt=1)
    """θ̂ before the first estimate (cold start)."""
    theta_floor: float = Field(default=0.01, ge=0, lt=1)
    """Lower clip of θ̂ (the paper's non-stationary runs use 0.7)."""
    theta_max: float = Field(default=0.80, gt=0, lt=1)
    theta_ema: float = Field(default=0.3, gt=0, le=1)
    """EMA weight of a new θ* on the smoothed θ̂."""
    theta_form: Literal["camera", "exact"] = "camera"
    """Right side of the θ equation: ``p0·α_p/α_d`` (camera-ready, the code's IFR path) or
    ``−ln(1−p0)·α_p/α_d`` (exact CFR)."""
    ifr: bool = True
    """Apply the IFR correction Δθ when the fitted hazard slope η̂ > 0 (§2.4)."""
    theta_fixed: float | None = Field(default=None, gt=0, lt=1)
    """Pin θ (no online threshold; the paper's ``eb_kratio`` baseline)."""
    k_fixed: int | None = Field(default=None, ge=1)
    """Pin k (fixed-k sweeps of the paper's Fig. 3)."""
    window: int = Field(default=500, ge=1)
    update_every: int = Field(default=100, ge=1)
    min_samples: int = Field(default=30, ge=1)

    @model_validator(mode="after")
    def _theta_range(self) -> ThresholdOptions:
        if self.theta_floor > self.theta_max:
            raise ValueError(
                f"theta_floor ({self.theta_floor}) must not exceed theta_max ({self.theta_max})"
            )
        return self


class BoundOptions(_Group):
    """The memory-safe batch size (§2.5): the paper's N̂* or the KV forecast."""

    auto_n: bool = True
    """Cap N by the memory-safe N̂* (CLT form) after each estimate."""
    eps: float = Field(default=0.01, gt=0, lt=1)
    """Target KV-overflow probability ε of N̂*."""
    n_bound: Literal["clt", "forecast"] = "forecast"
    """What keeps EB within the KV cache: ``clt`` = the paper's N̂* (§2.5, the CFR cycle
    occupancy); ``forecast`` = N ≤ the steady-state bound of continuous batching (the renewal
    occupancy of :func:`eb_theory.stationary_safe_n`, from the window) and every fill or
    refill limited to the queue-head requests the KV forecast admits
    (:mod:`tidal.batching.kv_forecast`: the running set's projected occupancy, conditioned on
    each request's age) — a refill whose admissible part fails the threshold test waits."""
    forecast_recent: int = Field(default=100, ge=0)
    """The forecast's survival is the pointwise max of the window's and that of the last
    ``forecast_recent`` completions (0: the window alone): a shift to longer outputs shows in
    the latest completions one update after it starts, in the window's mixture only slowly
    (:meth:`tidal.batching.kv_forecast.KVForecast.set_outputs`)."""
    cold_reserve: float = Field(default=0.5, ge=0, lt=1)
    """Before the first estimate (the forecast has no survival curve yet), forecast-bounded
    admissions keep this fraction of the KV cache free: the running set's full contexts
    (prompts counted whole while they are being prefilled) plus the candidate's must fit in
    ``(1 − cold_reserve)·C``. 0.5 = every admitted context may double before any output length
    has been observed; 0 = vLLM's admission (prompts up to the cache)."""
    prefer: Literal["no-preemption", "throughput"] = "no-preemption"
    """Which baseline EB⁺ falls back to where MB's extra throughput is bought by admitting past
    the cache (recompute preemption; docs/design/eb-defaults.md, "Where EB⁺'s guarantee
    holds"): ``no-preemption`` = MB mode admits within the KV forecast
    (``selector.mb_cap``), so EB⁺ preempts no more than EB; ``throughput`` = MB mode is
    vLLM's MB (sets ``selector.mb_cap: none``: N_max, recompute preemption), so EB⁺ reaches
    MB's throughput with MB's preemptions. Where the forecast never refuses an admission
    vLLM would make, the two coincide."""

    mb_eps: float | None = Field(default=0.01, gt=0, lt=1)
    """Overflow probability ε of the MB mode's forecast admission test (``mb_cap:
    forecast``; None: ``eps``, EB's) until the forecast's first miss (a preemption in MB mode;
    with ``mb_count_cap: feedback`` also a running request older than every output of the
    forecast's sample), ``eps`` after it. Issue 18's grid (docs/design/eb-defaults.md): with
    the count cap released, 0.1 admits as far as vLLM's MB where outputs are bounded (the MoE
    on H100 with arXiv lengths 0.99× of MB, 0.97× at 0.02, 0.96× at 0.01) but preempts
    0.3–0.7 % of requests on decode-heavy mixes where EB preempts none; 0.01 (EB's ε) keeps
    EB's preemptions in all but 4 of the grid's 630 cells."""
    miss_share: float = Field(default=0.2, ge=0.0, lt=1.0)
    """With ``mb_count_cap: feedback``, the forecast has missed once ⌈miss_share·n⌉ (at least
    one) of the n running requests are older than every output of its sample (0: the oldest
    alone)."""
    mb_count_cap: bool | Literal["feedback"] = "feedback"
    """With ``mb_cap: forecast``, also cap MB's running count by the steady-state bound of
    :func:`eb_theory.stationary_safe_n`: ``true`` always, ``false`` never, ``feedback`` from
    the forecast's first miss on — a preemption in MB mode, or a running request older than
    every output of the forecast's sample (its survival is then an extrapolation: the outputs
    got longer than anything it has seen, as in Table 5's H200 distribution shift, where the
    forecast alone preempts 13.5 % of requests and the count cap 0 %). Until a miss the
    forecast alone bounds MB mode (issue 18's grid: within 1 % of vLLM's MB where it never
    preempts)."""


class PhaseOptions(_Group):
    """The phase machine (§3.2): KV-aware gate and N recovery."""

    kv_gate: bool = True
    """Post-camera-ready KV-aware gate: no Phase 1→2 refill while the KV cache is 'full'."""
    kv_threshold_max: float = Field(default=0.6, gt=0, le=1)
    output_margin: float = Field(default=0.5, gt=0)
    n_update_cooldown_s: float = Field(default=2.0, ge=0)
    """Minimum time between an N change and an N recovery."""
    n_recovery: Literal["n_hat", "n_max"] = "n_hat"
    """What the Phase-1 N recovery, the reset to Phase 0 and EB⁺'s MB → EB switch restore N
    to: ``n_hat`` = min(N_max, N̂*), so N never exceeds the memory-safe bound (the paper's
    stated invariant, "effective batch size min(N̂*, N)"); ``n_max`` = N_max as the authors'
    scheduler does, whose memory-safe update also leaves the recovery clock alone — under a
    saturated queue (≥ N_max/2 waiting) N returns to N_max 2 s after each recovery and the
    KV-aware gate, not N̂*, bounds the batch (the configuration behind the paper's EB numbers;
    see ``docs/design/eb-defaults.md``)."""
    switch_n: Literal["fill", "demand"] = "fill"
    """N of EB mode after an MB → EB switch with requests decoding: ``fill`` = as a
    standalone EB's initial fill leaves it — the demand #decoding + #waiting where it is at
    least EB's minimum N (max(16, N_max/10)), else the N cap (``n_recovery``'s target);
    ``demand`` = min(#decoding + #waiting, N cap), as the reference. Below N cap/2 waiting
    the N recovery never fires, so a switch taken at a small demand, while the closed loop's
    replacement arrivals were in flight, kept N at that momentary count (A100 / Qwen3-8B /
    arXiv c = 4: N = 2 for the rest of the run, 5 % below both baselines)."""


class DemandOptions(_Group):
    """EB⁺'s demand EMA N_obs (§3.3) and the drain, ebb and surge filters on its decisions."""

    drain_n: float = Field(default=2, ge=0)
    """No decision while the demand EMA N_obs is below this (drain filter; the reference:
    16, where the closed form's RHS ∝ 1/N_obs explodes while the system empties). The steps
    crossover prices both cycles at any N, and at c = 4 it tells EB from MB within 0.3 % of
    their realised throughputs (issue 18), so 2 lets it decide there."""
    ebb_factor: float = Field(default=2.0, ge=0)
    """No decision while the demand is below N_obs/ebb_factor (0: off, as the reference): the
    mirror of the surge — N_obs decays slowly (0.03 per step), so between two load phases it
    still reports the departed load, and with ``crossover_lhs: steps`` a decision there can
    leave EB for MB just before the next phase arrives."""
    drain_refill: bool = True
    """EB mode: once the demand has fallen ``k̂`` below its peak since the last refill (k̂
    completions without a replacement: arrivals have stopped or slowed), refill with what
    waits instead of holding it for the threshold test, whose queue would not grow (the
    closed loop's last arrivals waited up to 30 s for the decoding set to drain). False:
    the threshold test alone, as EB and the reference."""
    n_obs_up: float = Field(default=0.3, gt=0, le=1)
    n_obs_down: float = Field(default=0.03, gt=0, le=1)
    surge_factor: float = Field(default=2.0, gt=1)
    """Evaluate at once when demand exceeds surge_factor·N_obs (outside cooldown)."""
    surge_n: Literal["demand", "ema"] = "demand"
    """N_obs of a surge evaluation: ``demand`` = the demand that fired it (the EMA is known to
    lag it by more than ``surge_factor``×); ``ema`` = the lagging EMA, as the reference."""


class SelectorOptions(_Group):
    """EB⁺'s crossover test with hysteresis δ (§3.3) and its MB mode."""

    delta: float = Field(default=1e-6, ge=0)
    """Hysteresis δ of the crossover test (s/token; the paper's runs: 1e-5)."""
    delta_adaptive: bool = False
    """δ = max(δ, delta_k·stdev of the last ``signal_window`` signals) once ≥ 4 are known."""
    delta_k: float = Field(default=2.0, ge=0)
    signal_window: int = Field(default=10, ge=1)
    sticky: float = Field(default=3.0, ge=1)
    """Leaving EB needs ``sticky``·δ of evidence."""
    cooldown: int = Field(default=3, ge=0)
    """Evaluations skipped after a switch."""
    cold_mode: Literal["mb", "eb"] = "mb"
    mb_cap: Literal["mb_safe", "forecast", "n_hat", "none"] = "forecast"
    """Running-set cap of EB⁺'s MB mode once the estimator has data: ``mb_safe`` = the
    memory-safe batch size of MB itself (the §2.5 CLT bound with MB's slot occupancy read from
    the estimator's window: ``μ_L + E[O²]/(2E[O])`` in steady state — the paper's ``D(θ → 0)``
    for geometric outputs — and ``(μ_L + t)·P(O > t)`` for a cohort admitted at once;
    :func:`eb_theory.mb_safe_n`);
    ``forecast`` = no count cap, but each admission must keep the running set's projected KV
    occupancy, conditioned on every running request's age, within the cache at every future
    step (:mod:`tidal.batching.kv_forecast`; a time-varying cap);
    ``n_hat`` = EB's N̂* (its CFR occupancy overstates MB's KV need on bounded outputs, so
    it costs MB throughput); ``none`` = N_max with recompute preemption, as the reference."""
    crossover_n: Literal["effective", "demand"] = "effective"
    """Batch sizes in the crossover test: ``demand`` = N_obs for both (reference);
    ``effective`` = min(N_obs, N_max) for MB and min(N_obs, N̂*, N_max) for EB's k̂."""
    crossover_lhs: Literal["workload", "steps"] = "steps"
    """LHS of the crossover: ``workload`` = ΔI(r) at the workload's decode share on every token
    (the paper); ``steps`` = the interference MB pays at the N it runs
    (:func:`eb_theory.mb_interference`: the same at N ≥ 1 + μ_O, less below, where most MB
    steps carry no prefill)."""
    mb_cost: Literal["step", "paper"] = "step"
    """β_MB^e used by the selector: ``step`` = β_EB^w + the simulator's step interference
    (self-calibrated); ``paper`` = the paper's measured quadratic where one exists."""


class CostOptions(_Group):
    """How EB⁺'s crossover prices the two policies (§2.6; issue 18)."""

    crossover_cost: Literal["steps", "linear"] = "steps"
    """What the crossover evaluates: ``linear`` = the closed form on the fitted constants
    (§2.6, with ``mb_alpha``, ``crossover_lhs``, ``mb_cost``); ``steps`` = both policies'
    steady-state cycles on the deployment's step-time function at the operating point
    (:mod:`tidal.batching.eb_cost`; the closed form where the step function is unknown)."""
    delta_rel: float = Field(default=0.01, ge=0, lt=1)
    """With ``crossover_cost: steps``: δ = max(``delta``, ``delta_rel``·min(c_MB, c_EB)), at
    least a share of the per-token cost (0: ``delta`` alone). The absolute δ = 1e-6 s/token
    is 0.1 % of it at c = 4, inside the model's error (H200 / Qwen3-30B-A3B / PH c = 4:
    EB predicted 0.3–0.9 % cheaper, realised 6 % dearer). 1 %: the guarantee's tolerance.
    δ = the share alone (no floor) also switched B200 / Qwen3-8B / PH at c = 512 / 2048,
    where 1e-6 is 6 % of the cost and EB wins by 2 %, but on one noisy evaluation at
    c = 128 too, where MB wins by 5 % (``confirm`` did not fix that one)."""
    delta_cap: float = Field(default=0.03, ge=0, lt=1)
    """With ``delta_rel``: the absolute ``delta`` counts up to this share of the cost (0: in
    full). On a fast GPU 1e-6 s/token is 6 % of the per-token cost (B200 / Qwen3-8B / PH
    c = 512 / 2048: EB predicted 3.4–4.8 % cheaper, 1.7–2.5 % faster, kept MB); with no
    floor at all one noisy evaluation past 1 % switched c = 128, where MB wins by 5 %."""
    confirm: float = Field(default=2.0, ge=0)
    """A switch whose signal is past its threshold (δ, or ``sticky``·δ out of EB) by less
    than ``confirm``× needs the previous evaluation past it too (0: off). With
    ``delta_rel`` the threshold is 1 %, about the evaluations' noise where the two modes
    are within 2 % (B200 / Qwen3-8B / PH c = 128, H100 / 70B / ShareGPT c = 512: one
    evaluation in five crossed it, and EB⁺ ran EB where MB wins by 1.1–1.6 %)."""
    mb_alpha: Literal["step", "prefill"] = "step"
    """α_MB, the fixed cost of one MB step in the crossover's RHS: ``prefill`` = α_p (the
    paper); ``step`` = max(α_p, α_d) — a mixed step reads the weights as a decode step does,
    and where the prefill fit's intercept vanishes (compute-bound prefills: A100, L40S, A40)
    α_p credits MB's steps with no fixed cost at all while EB's decode steps pay α_d."""


class ProbeOptions(_Group):
    """EB⁺'s measured arbitration where the crossover's prediction is within its error
    (:mod:`tidal.batching.ebplus_probe`; issue 18)."""

    measure: bool = False
    """Measure both modes where the prediction is within ``probe_band`` of the cost (on
    ``probe_side``); off by default, on with ``prefer: throughput`` (MB mode = vLLM's MB,
    whose running count the crossover does not price). On issue 18's grid at ``prefer:
    throughput`` it holds the 3 RTX PRO 6000 / Llama-3.1-70B / arXiv cells (0.987 → 0.991×
    MB) and loses none; at the default preference it found EB⁺'s forecast-capped MB mode no
    faster there, and misread c = 4 cells (``docs/design/eb-defaults.md``)."""
    probe_band: float = Field(default=0.06, ge=0, lt=1)
    """The prediction's error on issue 18's grid: up to 5.4 % of the cost (RTX PRO 6000 /
    Llama-3.1-70B / arXiv: EB predicted 4 % cheaper, MB realised 1.3 % faster)."""
    probe_side: Literal["eb", "both"] = "eb"
    """``eb``: probe only where the prediction favours EB (0 < c_MB − c_EB < band): the
    crossover prices MB at EB's N̂*, and vLLM's MB (``mb_cap: none``) runs at least that
    many, so its error lies on that side; a prediction for MB is kept (``both``: either
    side; it measured the MoE / 70B arXiv cells on H100 / A100 / B200 right but spent 15 %
    of the run in EB, 22 % slower there: 0.97× MB)."""
    probe_window: int = Field(default=150, ge=1)
    """Completions over which each mode's token rate is measured."""
    probe_generations: float = Field(default=4.0, ge=0)
    """A probe starts only where the window holds this many generations of the running set
    (``probe_window ≥ probe_generations·N``): a shorter one measures part of EB's cycle
    (B200 / Qwen3-8B / PH c = 128, N = 128: a 150-completion window read EB 4 % faster,
    MB wins by 5.4 %)."""
    probe_settle: int = Field(default=50, ge=0)
    """Completions skipped after the probe's switch (the new mode's transient)."""
    probe_margin: float = Field(default=0.0, ge=0, le=1)
    """The other mode is kept only when its rate beats the first's by this share."""
    probe_relevel: float = Field(default=0.25, gt=0)
    """A verdict holds while N, μ̂_L and μ̂_O stay within this share of their values at the
    probe's start."""


GROUPS: dict[str, type[_Group]] = {
    "threshold": ThresholdOptions,
    "bound": BoundOptions,
    "phase": PhaseOptions,
    "demand": DemandOptions,
    "selector": SelectorOptions,
    "cost": CostOptions,
    "probe": ProbeOptions,
}
GROUP_OF: dict[str, str] = {f: g for g, m in GROUPS.items() for f in m.model_fields}
"""Group of each knob: where a flat ``scheduler.eb.KNOB`` key goes."""

REFERENCE: dict[str, dict[str, Any]] = {
    "bound": {"n_bound": "clt", "cold_reserve": 0.0, "forecast_recent": 0, "mb_eps": None},
    "phase": {"n_recovery": "n_max", "switch_n": "demand"},
    "demand": {"surge_n": "ema", "ebb_factor": 0.0, "drain_refill": False, "drain_n": 16},
    "selector": {
        "delta": 1e-5,
        "mb_cap": "none",
        "crossover_n": "demand",
        "crossover_lhs": "workload",
        "mb_cost": "paper",
    },
    "cost": {"mb_alpha": "prefill", "crossover_cost": "linear", "delta_rel": 0.0, "confirm": 0.0},
    "probe": {"measure": False},
}
"""The paper's and its authors' scheduler's forms of every knob where ours differ
(``preset: reference``)."""


def nest(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its flat knob keys moved into their groups (``mb_memory_safe`` read)."""
    out = {k: (dict(v) if k in GROUPS and isinstance(v, dict) else v) for k, v in data.items()}
    for key in [k for k in out if k in GROUP_OF]:
        group = out.setdefault(GROUP_OF[key], {})
        if not isinstance(group, dict):
            break  # the group's own validation reports it
        if key in group:
            raise ValueError(f"{key}: given both flat and under {GROUP_OF[key]}; give one")
        group[key] = out.pop(key)
    memory_safe = out.pop("mb_memory_safe", False)
    if not isinstance(memory_safe, bool):
        raise ValueError(f"mb_memory_safe: give true or false, got {memory_safe!r}")
    if memory_safe and isinstance(out.setdefault("selector", {}), dict):
        out["selector"]["mb_cap"] = "n_hat"  # as before the grouping: it overrides mb_cap
    return out


def _prefer(data: dict[str, Any]) -> dict[str, Any]:
    """``bound.prefer: throughput`` sets ``selector.mb_cap: none`` (refusing another cap) and,
    unless given, ``probe.measure: true``: MB mode is then vLLM's MB, which holds more
    requests than the N̂* the crossover prices it at (:mod:`tidal.batching.ebplus_probe`)."""
    bound, selector = data.get("bound", {}), data.get("selector", {})
    if not (isinstance(bound, dict) and bound.get("prefer") == "throughput"):
        return data
    if not isinstance(selector, dict):
        return data  # the group's own validation reports it
    cap = selector.get("mb_cap", "none")
    if cap != "none":
        raise ValueError(f"prefer: throughput runs MB mode at mb_cap: none, not {cap!r}")
    probe = data.get("probe", {})
    if isinstance(probe, dict):  # vLLM's MB runs more requests than the crossover prices
        probe = {"measure": True, **probe}
    return {**data, "selector": {**selector, "mb_cap": "none"}, "probe": probe}


class EBOptions(StrictModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    preset: Literal["tidal", "reference"] = "tidal"
    """``reference``: every knob not given takes the paper's form (:data:`REFERENCE`:
    N̂* by the CLT, N recovery to N_max, δ = 1e-5, surge at the EMA, no ebb filter, MB at
    N_max, the crossover at the demand with the workload-share LHS and the measured β_MB^e);
    ``tidal``: the defaults of each group."""
    threshold: ThresholdOptions = ThresholdOptions()
    bound: BoundOptions = BoundOptions()
    phase: PhaseOptions = PhaseOptions()
    demand: DemandOptions = DemandOptions()
    selector: SelectorOptions = SelectorOptions()
    cost: CostOptions = CostOptions()
    probe: ProbeOptions = ProbeOptions()

    @model_validator(mode="before")
    @classmethod
    def _flat_keys_and_preset(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = nest(data)
        if data.get("preset") == "reference":
            for group, forms in REFERENCE.items():
                given = data.get(group, {})
                if isinstance(given, dict):
                    data[group] = {**forms, **given}
        return _prefer(data)

    def replace(self, **knobs: Any) -> EBOptions:
        """A copy with the knobs given by their flat names changed (validated)."""
        data = self.model_dump()
        for group, values in nest(knobs).items():
            data[group] = {**data[group], **values} if group in GROUPS else values
        return EBOptions.model_validate(data)
