"""A cluster run's metrics from its engines: policy counters and prefix-cache counters summed
over engines (stopped ones folded into :class:`RetiredStats`, so they can be dropped), and
latency figures over a selection of the request columns, read one column at a time."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from tidal.core.kv import KVBlockManager
from tidal.engine.scheduler import Scheduler
from tidal.engine.stats import PolicyStats


class CacheCounts:
    """Prefix-cache counters (tokens queried and hit, cached blocks evicted) summed over
    engines: the cluster's or one model's hit rate is Σ hits / Σ queries, vLLM's
    ``prefix_cache_hits / prefix_cache_queries`` over all its engines."""

    def __init__(self) -> None:
        self.queries = self.hits = self.evicted = 0
        self.host: list[int] | None = None
        """With a host tier, summed over engines: capacity (blocks), hit tokens, load ns,
        dropped blocks."""

    def add(self, kv: KVBlockManager | CacheCounts) -> CacheCounts:
        if isinstance(kv, CacheCounts):
            self.queries += kv.queries
            self.hits += kv.hits
            self.evicted += kv.evicted
            host = kv.host
        else:
            self.queries += kv.cache_queries
            self.hits += kv.cache_hits
            self.evicted += getattr(kv, "num_evicted_blocks", 0)
            tier = getattr(kv, "_tier", None)
            host = None
            if tier is not None:
                hits, load_ns = getattr(kv, "host_hit_tokens", 0), getattr(kv, "host_load_ns", 0)
                host = [tier.capacity, hits, load_ns, tier.num_evicted_blocks]
        if host is not None:
            self.host = [a + b for a, b in zip(self.host or [0] * 4, host, strict=True)]
        return self

    def metrics(self, caching: bool) -> dict[str, Any]:
        """The keys of :func:`tidal.sim.run.prefix_cache_metrics` (one instance's); the host
        tier's only where an engine had one."""
        out = {
            "prefix_caching": caching,
            "prefix_cache_queries": self.queries,
            "prefix_cache_hits": self.hits,
            "prefix_cache_hit_rate": self.hits / self.queries if self.queries else 0.0,
            "prefix_cache_evicted_blocks": self.evicted,
        }
        if self.host is not None:
            blocks, hits, load_ns, dropped = self.host
            out["prefix_cache_host_blocks"] = blocks
            out["prefix_cache_host_hits"] = hits
            out["prefix_cache_host_hit_rate"] = hits / self.queries if self.queries else 0.0
            out["prefix_cache_host_load_s"] = load_ns / 1e9
            out["prefix_cache_host_evicted_blocks"] = dropped
        return out


def cache_counts(scheds: list[Scheduler | RetiredStats]) -> CacheCounts:
    out = CacheCounts()
    for s in scheds:
        out.add(s.cache if isinstance(s, RetiredStats) else s.kv)
    return out


class RetiredStats:
    """What :func:`policy_metrics` reads from schedulers, summed over stopped ones (so they
    can be dropped): integer counters and the policy stats (:class:`PolicyStats`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._ints: dict[str, int] = {}
        self._stats = PolicyStats()
        self.cache = CacheCounts()
        """The stopped engines' prefix-cache counters, summed."""

    def add(self, sched: Scheduler) -> None:
        for k, v in sched.extra_metrics().items():
            if isinstance(v, int) and not isinstance(v, bool):
                self._ints[k] = self._ints.get(k, 0) + v
        self._stats = self._stats + sched.stats()
        self.cache.add(sched.kv)

    def extra_metrics(self) -> dict[str, int]:
        return self._ints

    def stats(self) -> PolicyStats:
        return self._stats


def policy_metrics(scheds: list[Scheduler | RetiredStats]) -> dict[str, Any]:
    """The engines' own policy metrics, summed: every integer counter of ``extra_metrics``
    (``mode_switches``, ``num_intercepts``, ...), and the ratios of the summed policy stats
    (``eb_time_share``: the share of all engines' busy time spent in EB; absent for MB)."""
    out: dict[str, Any] = {}
    for s in scheds:
        for k, v in s.extra_metrics().items():
            if isinstance(v, int) and not isinstance(v, bool):
                out[k] = out.get(k, 0) + v
    total = PolicyStats.total(s.stats() for s in scheds)
    if total.eb_time_share is not None:
        out["eb_time_share"] = total.eb_time_share
    return out


def _p95(values: np.ndarray) -> float | None:
    """p95 of ``values`` (a temporary: reordered in place)."""
    return float(np.percentile(values, 95, overwrite_input=True)) if len(values) else None


class Selected(Mapping[str, np.ndarray]):
    """The rows ``sel`` of every column, selected when a column is read (one at a time)."""

    def __init__(self, cols: Mapping[str, np.ndarray], sel: np.ndarray) -> None:
        self.cols = cols
        self.sel = sel

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name][self.sel]

    def __iter__(self) -> Iterator[str]:
        return iter(self.cols)

    def __len__(self) -> int:
        return len(self.cols)


def latency_p95(cols: Mapping[str, np.ndarray]) -> dict[str, float | None]:
    """p95 TTFT and TPOT of the completed requests (TPOT: of those with > 1 output token),
    as :func:`~tidal.core.metrics.request_latencies` defines them."""
    done = cols["finish_ns"] >= 0
    first = cols["first_token_ns"][done]
    ttft = _p95((first - cols["arrival_ns"][done]) / 1e9)
    out = cols["output_tokens"][done]
    many = out > 1
    out = out[many]
    first = first[many]
    tpot = cols["finish_ns"][done][many] - first  # few arrays of the completed size at once
    del first
    tpot = tpot / 1e9
    tpot /= np.maximum(out - 1, 1)
    return {"ttft_p95_s": ttft, "tpot_p95_s": _p95(tpot)}
