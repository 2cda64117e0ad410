"""vLLM's ``--speculative-config``: the speculation method, its draft length k and Tidal's
acceptance model, with the closed forms of tokens per verification step.

A verification step proposes k draft tokens per request and the target model checks them with
k + 1 query rows; the tokens it keeps are the accepted prefix of the drafts plus one token of
its own (the bonus, or the correction at the first rejected position). With per-position
conditional acceptance rates α_i = P(draft i accepted | drafts 1…i−1 accepted), the expected
tokens per step are

    E[a] = 1 + Σ_{i=1..k} Π_{m≤i} α_m,  which for one α is (1 − α^{k+1}) / (1 − α)

(Leviathan et al., "Fast Inference from Transformers via Speculative Decoding", ICML 2023,
eq. 1). Sources of the default rates: docs/design/disaggregation-speculation.md §2.1.
"""

from __future__ import annotations

import json
import math
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from tidal.core.errors import ConfigError
from tidal.core.strict import StrictModel

SpecMethod = Literal["eagle3", "eagle", "mtp", "deepseek_mtp", "ngram", "draft_model"]

DEFAULT_ACCEPTANCE: dict[str, float] = {
    "mtp": 0.85,
    "eagle3": 0.7,
    "eagle": 0.7,
}
"""One α for every position where a default exists. ``mtp``: DeepSeek-V3's technical report
measures the second-token (MTP) acceptance at 85–90 % across topics; this default holds for
position 1 only (vLLM chains the one MTP module for k > 1: give a list). ``eagle3``/``eagle``:
α that reproduces the mean acceptance lengths τ = 2.8–3.5 published for a Llama-3.1-8B EAGLE-3
head at k = 7 (τ = (1 − α⁸)/(1 − α) → α ≈ 0.65–0.74); EAGLE-3 trains on its own drafts so
that α does not decay with position. ``ngram`` and ``draft_model`` depend on the workload and
the model pair: ``acceptance_rate`` is required."""


class SpeculativeConfig(StrictModel):
    """vLLM's ``speculative_config`` JSON keys, plus Tidal's ``acceptance_rate``.

    ``acceptance_rate``: one α for every position, or a list of k per-position conditional
    rates (vLLM has no such key: the simulator needs it, the real engine measures it)."""

    method: SpecMethod
    num_speculative_tokens: int = Field(ge=1, le=16)
    model: str | None = None
    """The draft model (``draft_model``) or the EAGLE head's checkpoint."""
    prompt_lookup_min: int | None = Field(default=None, ge=1)
    prompt_lookup_max: int | None = Field(default=None, ge=1)
    draft_tensor_parallel_size: int | None = Field(default=None, ge=1)
    acceptance_rate: float | list[float] | None = None

    @field_validator("acceptance_rate")
    @classmethod
    def _rates_in_range(cls, v: float | list[float] | None) -> float | list[float] | None:
        rates = [v] if isinstance(v, (int, float)) else (v or [])
        for a in rates:
            if not (0.0 <= a <= 1.0) or math.isnan(a):
                raise ValueError(f"{a} is not a probability: each rate must lie in [0, 1]")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> SpeculativeConfig:
        k = self.num_speculative_tokens
        if isinstance(self.acceptance_rate, list) and len(self.acceptance_rate) != k:
            raise ValueError(
                f"acceptance_rate has {len(self.acceptance_rate)} rates for "
                f"num_speculative_tokens={k}: give one rate, or one per position"
            )
        if self.method == "draft_model" and not self.model:
            raise ValueError("method draft_model needs 'model': the draft model's id")
        if self.method == "ngram":
            lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
            # vLLM's defaults: both 5 when unset; one given sets the other.
            lo, hi = lo or hi or 5, hi or lo or 5
            if lo > hi:
                raise ValueError(f"prompt_lookup_min {lo} > prompt_lookup_max {hi}")
            self.prompt_lookup_min, self.prompt_lookup_max = lo, hi
        return self

    def alphas(self) -> tuple[float, ...]:
        """The k per-position conditional acceptance rates (the given ones, else the method's
        default); a ConfigError naming ``acceptance_rate`` where neither exists."""
        k, rate = self.num_speculative_tokens, self.acceptance_rate
        if isinstance(rate, list):
            return tuple(float(a) for a in rate)
        if rate is not None:
            return (float(rate),) * k
        method = "mtp" if self.method == "deepseek_mtp" else self.method
        if method == "mtp" and k > 1:
            raise _needs_rates(self.method, "the published MTP rate covers position 1 only")
        if method not in DEFAULT_ACCEPTANCE:
            raise _needs_rates(self.method, "it depends on the workload and the model pair")
        return (DEFAULT_ACCEPTANCE[method],) * k

    def vllm_json(self) -> str:
        """The JSON to hand vLLM's ``--speculative-config``: Tidal's ``acceptance_rate`` (vLLM
        refuses unknown keys) and unset keys dropped. Nothing in Tidal launches vLLM yet
        (``tidal bench`` measures a running server); a launcher must pass this form."""
        data = self.model_dump(exclude_none=True, exclude={"acceptance_rate"})
        return json.dumps(data, sort_keys=True)

    def expected_tokens(self) -> float:
        """E[tokens per verification step] under :meth:`alphas`."""
        return expected_tokens(self.alphas())


def _needs_rates(method: str, why: str) -> ConfigError:
    return ConfigError(
        "speculative_config.acceptance_rate",
        f"method {method!r} has no default acceptance rate ({why})",
        'add "acceptance_rate": 0.7 (one α) or a list of num_speculative_tokens rates',
    )


def expected_tokens(alphas: tuple[float, ...] | list[float]) -> float:
    """E[a] = 1 + Σ_i Π_{m≤i} α_m: tokens kept per verification step (bonus included)."""
    total, survive = 1.0, 1.0
    for a in alphas:
        survive *= a
        total += survive
    return total


def expected_tokens_uniform(alpha: float, k: int) -> float:
    """The closed form (1 − α^{k+1}) / (1 − α) for one α (k + 1 at α = 1)."""
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def parse_speculative_config(text: str, field: str = "--speculative-config") -> SpeculativeConfig:
    """A ``--speculative-config`` JSON string as vLLM takes it; errors name the flag."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(field, f"not valid JSON ({err.msg})", EXAMPLE) from None
    if not isinstance(raw, dict):
        raise ConfigError(field, "must be a JSON object", EXAMPLE)
    try:
        return SpeculativeConfig.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "value"
        raise ConfigError(f"{field}.{where}", first["msg"], EXAMPLE) from None


EXAMPLE = 'e.g. {"method": "eagle3", "num_speculative_tokens": 3, "acceptance_rate": 0.7}'
