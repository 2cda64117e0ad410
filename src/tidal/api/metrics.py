"""Prometheus metrics of a serving engine (names after vLLM's, with a ``tidal:`` prefix).

Gauges are read from the engine at scrape time: ``num_requests_running``,
``num_requests_waiting`` (inbox + scheduler queue), ``kv_cache_usage_perc`` (used blocks /
blocks). Histograms are observed when a request ends: ``time_to_first_token_seconds`` (first
token − arrival), ``time_per_output_token_seconds`` ((finish − first token)/(outputs − 1)),
``e2e_request_latency_seconds``. Counters: prompt and generation tokens, requests by finish
reason, rejected requests (429), preemptions, prefix cache queries and hits (tokens, vLLM's
``prefix_cache_queries`` / ``prefix_cache_hits``), failed steps and requests (faults the engine
survived); ``engine_alive`` is 0 once the engine thread has died. One registry per app, so
several apps can live in one process (tests).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tidal.runtime.driver import EngineDriver, RequestHandle

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


class _EngineState(Collector):
    def __init__(self, driver: EngineDriver) -> None:
        self.driver = driver

    def collect(self) -> Iterator[Metric]:
        d = self.driver
        s = d.scheduler
        yield GaugeMetricFamily(
            "tidal:num_requests_running", "Requests in the running set.", s.num_running
        )
        yield GaugeMetricFamily(
            "tidal:num_requests_waiting", "Requests queued, not yet running.", d.num_queued()
        )
        yield GaugeMetricFamily(
            "tidal:kv_cache_usage_perc", "Share of KV cache blocks in use (0-1).", s.kv.usage()
        )
        yield CounterMetricFamily(
            "tidal:num_preemptions", "Preemptions by recompute.", s.num_preemptions
        )
        yield CounterMetricFamily("tidal:engine_steps", "Engine steps run.", d.num_steps)
        yield CounterMetricFamily(
            "tidal:prefix_cache_queries",
            "Prefix cache queries, in tokens (vLLM's name).",
            s.kv.cache_queries,
        )
        yield CounterMetricFamily(
            "tidal:prefix_cache_hits",
            "Prefix cache hits, in tokens (vLLM's name).",
            s.kv.cache_hits,
        )
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
    def __init__(self, driver: EngineDriver) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.ttft = Histogram(
            "tidal:time_to_first_token_seconds",
            "Time to first token.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.tpot = Histogram(
            "tidal:time_per_output_token_seconds",
            "Mean time per output token after the first, per request.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "tidal:e2e_request_latency_seconds",
            "Arrival to last token.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.prompt_tokens = Counter("tidal:prompt_tokens", "Prompt tokens.", registry=r)
        self.generation_tokens = Counter("tidal:generation_tokens", "Generated tokens.", registry=r)
        self.requests = Counter(
            "tidal:request_success",
            "Requests ended, by finish reason.",
            ["finished_reason"],
            registry=r,
        )
        self.rejected = Counter(
            "tidal:request_rejected", "Requests refused with 429 (queue full).", registry=r
        )
        r.register(_EngineState(driver))
        driver.done_callbacks.append(self.on_done)

    def on_done(self, h: RequestHandle) -> None:
        """Driver thread; prometheus_client's metrics are thread-safe."""
        req = h.request
        self.requests.labels(h.finish_reason or "unknown").inc()
        self.prompt_tokens.inc(req.prompt_len)
        self.generation_tokens.inc(req.num_output_tokens)
        if req.first_token_ns >= 0:
            self.ttft.observe((req.first_token_ns - req.arrival_ns) / 1e9)
            if req.num_output_tokens > 1 and req.finish_ns >= req.first_token_ns:
                self.tpot.observe(
                    (req.finish_ns - req.first_token_ns) / 1e9 / (req.num_output_tokens - 1)
                )
        if req.finish_ns >= 0 and h.finish_reason in ("length", "stop"):
            self.e2e.observe((req.finish_ns - req.arrival_ns) / 1e9)
