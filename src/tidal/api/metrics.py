"""Prometheus metrics of a serving engine, each under two names: ``tidal:NAME`` (no labels) and
vLLM's ``vllm:NAME`` with the label ``model_name`` (the served name), so vLLM's dashboards and
the clients that scrape ``vllm:*`` read the same values.

Gauges are read from the engine at scrape time: ``num_requests_running``,
``num_requests_waiting`` (inbox + scheduler queue), ``kv_cache_usage_perc`` (used blocks /
blocks). Histograms are observed when a request ends: ``time_to_first_token_seconds`` (first
token − arrival), ``time_per_output_token_seconds`` ((finish − first token)/(outputs − 1)),
``e2e_request_latency_seconds``, and vLLM's per-request token counts ``request_prompt_tokens``
/ ``request_generation_tokens`` (1-2-5 buckets up to the context length, as vLLM's). Counters:
prompt and generation tokens, requests by finish reason, rejected requests (429), preemptions,
prefix cache queries and hits (tokens, vLLM's ``prefix_cache_queries`` /
``prefix_cache_hits``), speculative decoding's drafts, draft tokens and accepted tokens (in all
and by ``position``; vLLM's ``spec_decode_num_*``, only when the engine speculates), failed
steps and requests (faults the engine survived); ``engine_alive`` is 0 once the engine thread
has died. One registry per app, so several apps can live in one process (tests).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tidal.runtime.driver import EngineDriver, RequestHandle
from tidal.runtime.ngram import SpecDecodeStats

_LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


def _token_buckets(max_model_len: int) -> list[float]:
    """vLLM's ``build_1_2_5_buckets``: 1, 2, 5, 10, 20, 50, … up to ``max_model_len``."""
    out: list[float] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_model_len:
                return out
            out.append(float(m * scale))
        scale *= 10


class _Both:
    """One metric as ``tidal:NAME`` and ``vllm:NAME{model_name=...}`` (updated together)."""

    def __init__(
        self,
        kind: type[Counter] | type[Histogram],
        name: str,
        doc: str,
        registry: CollectorRegistry,
        model: str,
        labels: Sequence[str] = (),
        **kw: Any,
    ) -> None:
        self.own = kind(f"tidal:{name}", doc, list(labels), registry=registry, **kw)
        self.vllm = kind(f"vllm:{name}", doc, ["model_name", *labels], registry=registry, **kw)
        self.model = model
        self.has_labels = bool(labels)

    def pair(self, *values: str) -> tuple[Counter | Histogram, Counter | Histogram]:
        if self.has_labels:
            return self.own.labels(*values), self.vllm.labels(self.model, *values)
        return self.own, self.vllm.labels(self.model)

    def inc(self, amount: float = 1, *labels: str) -> None:
        for m in self.pair(*labels):
            m.inc(amount)  # type: ignore[union-attr]

    def observe(self, value: float) -> None:
        for m in self.pair():
            m.observe(value)  # type: ignore[union-attr]


def _gauge(name: str, doc: str, model: str, value: float) -> Iterator[Metric]:
    yield GaugeMetricFamily(f"tidal:{name}", doc, value)
    g = GaugeMetricFamily(f"vllm:{name}", doc, labels=["model_name"])
    g.add_metric([model], value)
    yield g


def _counter(name: str, doc: str, model: str, value: float) -> Iterator[Metric]:
    yield CounterMetricFamily(f"tidal:{name}", doc, value)
    c = CounterMetricFamily(f"vllm:{name}", doc, labels=["model_name"])
    c.add_metric([model], value)
    yield c


def _spec_decode(stats: SpecDecodeStats, model: str) -> Iterator[Metric]:
    """vLLM's speculative-decoding counters (present when the engine speculates)."""
    yield from _counter(
        "spec_decode_num_drafts", "Drafts verified (one per request per step).", model,
        stats.num_drafts,
    )  # fmt: skip
    yield from _counter(
        "spec_decode_num_draft_tokens", "Draft tokens verified.", model, stats.num_draft_tokens
    )
    yield from _counter(
        "spec_decode_num_accepted_tokens", "Draft tokens accepted.", model,
        stats.num_accepted_tokens,
    )  # fmt: skip
    name, doc = "spec_decode_num_accepted_tokens_per_pos", "Accepted draft tokens by position."
    own = CounterMetricFamily(f"tidal:{name}", doc, labels=["position"])
    vllm = CounterMetricFamily(f"vllm:{name}", doc, labels=["model_name", "position"])
    for pos, n in enumerate(stats.accepted_per_pos):
        own.add_metric([str(pos)], n)
        vllm.add_metric([model, str(pos)], n)
    yield own
    yield vllm


class _EngineState(Collector):
    def __init__(self, driver: EngineDriver, model: str) -> None:
        self.driver = driver
        self.model = model

    def collect(self) -> Iterator[Metric]:
        d, m = self.driver, self.model
        s = d.scheduler
        yield from _gauge(
            "num_requests_running", "Requests in the running set.", m, s.num_running
        )
        yield from _gauge(
            "num_requests_waiting", "Requests queued, not yet running.", m, d.num_queued()
        )
        kv = s.kv.cache_stats()
        usage = (kv.num_blocks - kv.num_free_blocks) / kv.num_blocks
        yield from _gauge("kv_cache_usage_perc", "Share of KV cache blocks in use (0-1).", m, usage)
        yield from _counter("num_preemptions", "Preemptions by recompute.", m, s.num_preemptions)
        yield from _counter(
            "prefix_cache_queries", "Prefix cache queries, in tokens.", m, kv.queries
        )
        yield from _counter(
            "prefix_cache_hits", "Prefix cache hits, in tokens.", m, kv.hits
        )
        if d.rt.config.speculative_config is not None:
            yield from _spec_decode(d.runner.spec_stats, m)
        yield CounterMetricFamily("tidal:engine_steps", "Engine steps run.", d.num_steps)
        yield CounterMetricFamily(
            "tidal:engine_step_failures",
            "Steps that raised (their batch failed).",
            d.num_step_failures,
        )
        yield CounterMetricFamily(
            "tidal:engine_request_failures",
            "Requests failed by a fault of their own.",
            d.num_request_failures,
        )
        yield GaugeMetricFamily("tidal:engine_alive", "1 while the engine thread runs.", d.alive)


class EngineMetrics:
    def __init__(self, driver: EngineDriver, model: str = "") -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        lat: dict[str, Any] = {"buckets": _LATENCY_BUCKETS}
        self.ttft = _Both(
            Histogram, "time_to_first_token_seconds", "Time to first token.", r, model, **lat
        )
        self.tpot = _Both(
            Histogram,
            "time_per_output_token_seconds",
            "Mean time per output token after the first, per request.",
            r,
            model,
            **lat,
        )
        self.e2e = _Both(
            Histogram, "e2e_request_latency_seconds", "Arrival to last token.", r, model, **lat
        )
        tok: dict[str, Any] = {"buckets": _token_buckets(driver.rt.max_model_len)}
        self.request_prompt = _Both(
            Histogram, "request_prompt_tokens", "Prompt tokens per request.", r, model, **tok
        )
        self.request_generation = _Both(
            Histogram, "request_generation_tokens", "Output tokens per request.", r, model, **tok
        )
        self.prompt_tokens = _Both(Counter, "prompt_tokens", "Prompt tokens.", r, model)
        self.generation_tokens = _Both(Counter, "generation_tokens", "Generated tokens.", r, model)
        self.requests = _Both(
            Counter,
            "request_success",
            "Requests ended, by finish reason.",
            r,
            model,
            labels=["finished_reason"],
        )
        self.rejected = _Both(
            Counter, "request_rejected", "Requests refused with 429 (queue full).", r, model
        )
        r.register(_EngineState(driver, model))
        driver.done_callbacks.append(self.on_done)

    def on_done(self, h: RequestHandle) -> None:
        """Driver thread; prometheus_client's metrics are thread-safe."""
        req = h.request
        self.requests.inc(1, h.finish_reason or "unknown")
        self.prompt_tokens.inc(req.prompt_len)
        self.generation_tokens.inc(req.num_output_tokens)
        self.request_prompt.observe(req.prompt_len)
        self.request_generation.observe(req.num_output_tokens)
        if req.first_token_ns >= 0:
            self.ttft.observe((req.first_token_ns - req.arrival_ns) / 1e9)
            if req.num_output_tokens > 1 and req.finish_ns >= req.first_token_ns:
                self.tpot.observe(
                    (req.finish_ns - req.first_token_ns) / 1e9 / (req.num_output_tokens - 1)
                )
        if req.finish_ns >= 0 and h.finish_reason in ("length", "stop"):
            self.e2e.observe((req.finish_ns - req.arrival_ns) / 1e9)
