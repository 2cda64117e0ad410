"""Typed workload configuration (YAML-loadable; unknown keys are refused)."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from tidal.core.strict import StrictModel
from tidal.workload.parallel_probe import ParallelProbeOptions

MAX_TOKENS = 2**31 - 1
"""Largest token count of one field (the loaders' :data:`tidal.workload._io.MAX_TOKENS`)."""
MAX_SPAN_S = 2**60 / 1e9
"""Longest time a run may span (:data:`tidal.workload._io.MAX_SPAN_NS`, in seconds)."""
MAX_REQUESTS = 20_000_000
"""Most requests a synthetic or generated workload may hold (``num_requests × n``): its arrays,
then the simulator's state, are allocated per request (as ServeGen's ``max_expected``)."""


class WorkloadConfig(StrictModel):
    """Either a trace to replay (``trace``) or a synthetic generator (``num_requests`` + ``rate``).

    Length distributions (``length_dist``): ``fixed`` (exactly ``prompt_len``/``output_len``),
    ``uniform`` (± ``length_jitter`` around them), ``uniform-below`` (from ``1 − length_jitter``
    of them up to them, as ``benchmark_serving.py``'s random dataset), ``geometric`` (means
    ``prompt_len``/``output_len``), ``lognormal`` (medians, shape ``length_sigma``),
    ``empirical:NAME`` with NAME in ``sharegpt``, ``arxiv``, ``bwb`` (the files under
    ``shared/traces/length_distributions``) or a path to a CSV with
    ``num_prefill_tokens,num_decode_tokens`` columns; pairs are sampled jointly. See
    :mod:`tidal.workload.lengths` for the exact formulas.
    """

    model_config = ConfigDict(extra="forbid")

    trace: str | None = None
    """Path of a trace: Azure LLM 2023 CSV(.gz), Mooncake JSONL(.gz), or a ServeGen
    ``*_trace_csv.tar.gz`` / directory of ``chunk-*-trace.csv`` files, or a run's
    ``requests.parquet`` (e.g. a measured run of ``tidal bench serve``,
    :mod:`tidal.workload.measured`)."""
    trace_format: Literal["auto", "azure", "mooncake", "servegen", "measured"] = "auto"
    spread_ticks: bool = False
    """Mooncake only: move each request uniformly within its timestamp tick (3 s in the
    conversation trace) instead of replaying the quantised times."""
    hash_block_tokens: int = Field(default=512, ge=1, le=MAX_TOKENS)
    """Mooncake only: tokens per ``hash_ids`` entry (512 in the FAST'25 traces); the ids are
    the prompts' content for prefix caching."""
    shared_prefix_groups: int = Field(default=0, ge=0, le=MAX_TOKENS)
    """Synthetic: G system prompts; request i starts with prompt ``i mod G`` (0: none)."""
    shared_prefix_len: int = Field(default=0, ge=0, le=MAX_TOKENS)
    """Synthetic: tokens of each shared system prompt (the prompt length adds to it)."""
    n: int = Field(default=1, ge=1, le=MAX_REQUESTS)
    """Synthetic: parallel sampling, each prompt answered ``n`` times (vLLM's
    ``SamplingParams.n``). As vLLM v1 does, the n branches are n requests of one prompt that
    arrive together and share it through the prefix cache; ``num_requests`` counts prompts."""
    branch_policy: Literal["all", "parallel-probe"] = "all"
    """Parallel sampling: ``all`` runs every branch to completion (majority voting);
    ``parallel-probe`` applies Parallel-Probe's consensus early stop and deviation pruning
    (:mod:`tidal.workload.parallel_probe`; each branch decodes only what the controller lets it)."""
    parallel_probe: ParallelProbeOptions = Field(default_factory=ParallelProbeOptions)
    """Parallel-Probe's parameters (paper defaults) and its answer model."""
    turns: int = Field(default=1, ge=1)
    """Synthetic: turns per multi-turn session (1: independent requests); each turn's prompt
    is the previous prompt + its answer + new user tokens (:mod:`tidal.workload.sessions`)."""
    think_time_s: float = Field(default=0.0, ge=0, le=MAX_SPAN_S, allow_inf_nan=False)
    """Multi-turn sessions: mean (exponential) time between an answer and the next turn."""
    handoff: Literal["kv", "text"] = "kv"
    """Sessions as agent chains (``think_time_s: 0``): each agent gets the previous context
    as KV (``kv``: the context is a cached prefix, as Agent Primitives' latent handoff) or
    re-sent as text after its own instruction (``text``: same tokens, nothing reused)."""
    max_requests: int | None = Field(default=None, ge=1)
    """Keep only the first N requests of the trace (after the time window)."""
    rate_scale: float = Field(default=1.0, gt=0)
    """Multiply the trace's arrival rate (timestamps divided by this factor). For ServeGen
    and synthetic workloads the sampled rates are multiplied instead (times stay real)."""
    start_s: float = Field(default=0.0, ge=0)
    """Time window start, seconds from the trace's first arrival."""
    end_s: float | None = Field(default=None, gt=0)
    """Time window end (exclusive), seconds from the trace's first arrival; applied before
    rate scaling."""

    num_requests: int | None = Field(default=None, ge=1, le=MAX_REQUESTS)
    """Synthetic and generated workloads: the request count; with a trace: keep the first N
    (as ``max_requests``)."""
    rate: float | None = Field(default=None, gt=0)
    """Synthetic arrival rate in requests/s; ``inf`` sends everything at t = 0."""
    arrival_cv: float = Field(default=1.0, ge=1e-3, le=1e3)
    """Coefficient of variation of inter-arrival times: 1 = Poisson, otherwise Gamma (shape
    1/cv², finite and sampled in float64 for cv in [1e-3, 1e3])."""
    prompt_len: int = Field(default=512, ge=1, le=MAX_TOKENS)
    output_len: int = Field(default=256, ge=1, le=MAX_TOKENS)
    length_dist: str = "fixed"
    length_jitter: float = Field(default=0.5, ge=0, lt=1)
    length_sigma: float = Field(default=1.0, gt=0)

    max_prompt_len: int | None = Field(default=None, ge=1)
    """Cap prompt lengths (longer prompts are truncated)."""
    max_output_len: int | None = Field(default=None, ge=1)
    """Cap output lengths."""
    augmented: str | None = None
    """An augmented (tool-calling) workload: ``infercept-mix`` (INFERCEPT's six augmentation
    types, uniformly mixed), ``infercept:TYPE[,TYPE…]`` (some of them), or
    ``augmented:FILE.jsonl`` (a user's segments, :mod:`tidal.workload.augmented_jsonl`).
    Generated ones need ``num_requests`` and ``rate``."""
    call_time_dist: Literal["type", "N", "U", "R", "L", "B"] = "type"
    """Augmented workloads: call durations from each type's statistics, or one of
    INFERCEPT's synthetic families (:mod:`tidal.workload.augmented`)."""
    max_context: int | None = Field(default=2048, ge=2)
    """Augmented workloads: cap on a request's final context (INFERCEPT caps at 2048)."""
    concurrency: int | None = Field(default=None, ge=1)
    """Closed loop: keep this many requests in flight; a new one is sent when one finishes
    (``vllm bench serve --max-concurrency``). Arrival times of the workload are then ignored."""
    warmup_requests: int = Field(default=0, ge=0)
    """Requests sent (and completed) before the measured workload and left out of the metrics
    (``vllm bench serve --num-warmups``); the instance keeps its state, e.g. online estimators."""

    @property
    def first_requests(self) -> int | None:
        """How many requests of a trace to keep: ``max_requests``, or ``num_requests`` (which
        means the same with a trace)."""
        return self.max_requests if self.max_requests is not None else self.num_requests

    @model_validator(mode="after")
    def _check(self) -> WorkloadConfig:
        if self.augmented is not None:
            if self.trace is not None:
                raise ValueError("augmented: give either a trace or an augmented workload")
            if self.concurrency is not None:
                raise ValueError("concurrency: augmented workloads are open loop (give a rate)")
            generated = not self.augmented.startswith("augmented:")
            if generated and (self.num_requests is None or self.rate is None):
                raise ValueError(
                    "num_requests: a generated augmented workload needs num_requests and rate"
                )
        elif self.trace is not None:
            if self.rate is not None:
                raise ValueError(
                    "rate: a trace brings its own arrival times; multiply its rate with "
                    "rate_scale (--rate-scale) instead"
                )
            if self.num_requests is not None and self.max_requests not in (
                None,
                self.num_requests,
            ):
                raise ValueError(
                    "num_requests: with a trace it keeps the first N requests, as max_requests "
                    f"does; give one of them (got {self.num_requests} and {self.max_requests})"
                )
        else:
            if self.num_requests is None:
                raise ValueError(
                    "num_requests: a synthetic workload needs a request count (or give a trace)"
                )
            if self.num_requests * self.n > MAX_REQUESTS:
                raise ValueError(
                    f"num_requests: {self.num_requests} prompts × n {self.n} exceed the "
                    f"{MAX_REQUESTS:,} requests a workload may hold"
                )
            if self.rate is None and self.concurrency is None:
                raise ValueError(
                    "rate: a synthetic workload needs a rate in req/s (or inf, or a concurrency)"
                )
        if self.branch_policy != "all" and self.n < 2:
            raise ValueError("branch_policy: parallel-probe needs parallel branches (n >= 2, --n)")
        if self.n > 1 and self.turns > 1:
            raise ValueError("n: parallel sampling of multi-turn sessions is not supported")
        if (self.shared_prefix_groups > 0) != (self.shared_prefix_len > 0):
            raise ValueError(
                "shared_prefix_groups: give both shared_prefix_groups and shared_prefix_len "
                "(--shared-prefix-groups G --shared-prefix-len L), or neither"
            )
        if self.end_s is not None and self.end_s <= self.start_s:
            raise ValueError("end_s: the time window ends before it starts")
        if self.rate is not None and math.isnan(self.rate):
            raise ValueError("rate: must be a number of requests per second or inf")
        return self
