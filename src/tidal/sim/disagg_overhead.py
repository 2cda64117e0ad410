"""The per-request latency of a disaggregated serving path that the pools' steps, queues and
links do not give (``deployment.request_overhead_ms``; docs/design/disaggregation-speculation.md
§1.7).

Between a client's request and its first token a disaggregated deployment runs more than the
prefill, the KV transfer and the first decode step Tidal prices: the router's two hops (prefill
leg, then decode leg), the prefill/decode handshake (SGLang: the decode side pre-allocates and
sends its KV indices to the prefill's bootstrap queue; vLLM: the pull metadata rides the next
``SchedulerOutput``), and the engines' polling of transfer completion once per step. Each is
milliseconds of host work or one engine step; their sum is measured, not derived, so it is one
fixed latency per request, placed where the path has it:

* pull (vLLM NixlConnector): after the prefill leg's token, before the decode leg reaches the
  decode pool (the proxy's second hop; the prefill blocks stay held meanwhile);
* push (SGLang): after the decode side reserves its blocks, before the prefill leg reaches the
  prefill pool (the bootstrap handshake the prefill waits for; the decode blocks stay reserved).

TTFT gains a ``handoff`` term equal to it (``sim/disagg_metrics.ttft_breakdown``), and the
breakdown still telescopes to TTFT.
"""

from __future__ import annotations

from typing import Literal

PRESETS: dict[str, float] = {
    "dynamo": 180.0,
    "vllm-proxy": 110.0,
}
"""Measured serving paths, in ms (``request_overhead_ms: <name>``). Measured, not fitted:

* ``dynamo`` 180: NVIDIA Dynamo's disaggregated serving (frontend, router, SGLang workers):
  Qwen3-0.6B, a 10-token prompt, prefill and decode workers on one H200 node (same GPU): TTFT
  0.172–0.189 s, with and without a warm-up request (ai-dynamo/dynamo pull request 4058, "Add
  dummy warmup req for prefill"); the midpoint, less nothing for compute (a 10-token prefill and
  one decode step of a 0.6B model are a few ms, inside the range's spread). Measured with SGLang
  workers; for Dynamo's vLLM workers it is an assumption (same frontend and router, vLLM's
  NixlConnector hand-off instead of SGLang's bootstrap).
* ``vllm-proxy`` 110: vLLM NixlConnector behind vLLM's proxy, 3P1D: the decode-side handover
  (prefill samples token 1 → client receives it) is ~197 ms p50, of which ~29 ms is the KV
  transfer and ~58 ms the decode side's recompute of token 1 with its step alignment
  (vllm-project/vllm issue 50913 and pull request 51919), both priced by Tidal already;
  197 − 29 − 58 = 110 ms is the rest: the proxy's serial dispatch, pull metadata waiting for the
  in-flight step, completion polled once a step. Its step-bound part was measured at ~28 ms
  steps; shorter steps shrink it (not modelled).
"""

REQUEST_OVERHEAD_MS: dict[str, float] = {"sglang": PRESETS["dynamo"], "vllm": PRESETS["vllm-proxy"]}
"""``request_overhead_ms: auto`` by the decode pool's engine: the one measurement of each
engine's path (SGLang's was made behind Dynamo)."""

OverheadValue = float | Literal["auto", "dynamo", "vllm-proxy"]


def resolve_request_overhead_ms(value: OverheadValue, decode_engine: str) -> float:
    """``deployment.request_overhead_ms`` in ms: ``auto`` → the decode engine's
    :data:`REQUEST_OVERHEAD_MS`, a preset name → :data:`PRESETS`, a number → itself."""
    if value == "auto":
        return REQUEST_OVERHEAD_MS[decode_engine]
    if isinstance(value, str):
        return PRESETS[value]
    return float(value)


def overhead_ns(value: OverheadValue, decode_engine: str) -> int:
    """The same in whole ns (the event clock's unit)."""
    return round(resolve_request_overhead_ms(value, decode_engine) * 1e6)
