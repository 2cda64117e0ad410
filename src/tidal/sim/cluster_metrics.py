"""A cluster run's metrics from its engines: policy counters and prefix-cache counters summed
over engines (stopped ones folded into :class:`RetiredStats`, so they can be dropped), and
latency figures over a selection of the request columns, read one column at a time."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from tidal.core.kv import KVBlockManager
from tidal.core.metrics import (
    column_chunks,
    gathered,
    tpot_columns,
    tpot_completed,
    ttft_completed,
)
from tidal.core.spool import STREAM_ROWS
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
            st = kv.cache_stats()
            self.queries += st.queries
            self.hits += st.hits
            self.evicted += st.evicted_blocks
            host = None
            if st.host_tier_blocks:
                host = [st.host_tier_blocks, st.host_hit_tokens, st.host_load_ns]
                host.append(st.host_evicted_blocks)
        if host is not None:
            self.host = [a + b for a, b in zip(self.host or [0] * 4, host, strict=True)]
        return self

    def metrics(self, caching: bool) -> dict[str, Any]:
        """The keys of :func:`tidal.sim.single.prefix_cache_metrics` (one instance's); the host
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
    if out.get("spec_decode_num_drafts"):  # vLLM's mean acceptance length, of the sums
        out["spec_decode_mean_acceptance_length"] = (
            1 + out["spec_decode_num_accepted_tokens"] / out["spec_decode_num_drafts"]
        )
    total = PolicyStats.total(s.stats() for s in scheds)
    if total.eb_time_share is not None:
        out["eb_time_share"] = total.eb_time_share
    return out


def _p95(values: np.ndarray) -> float | None:
    """p95 of ``values`` (a temporary: reordered in place)."""
    return float(np.percentile(values, 95, overwrite_input=True)) if len(values) else None


def model_rows(cols: Mapping[str, np.ndarray], index: int) -> np.ndarray:
    """``cols["model"] == index``, computed a row chunk at a time (one boolean per row)."""
    n = len(next(iter(cols.values()))) if not hasattr(cols, "num_rows") else cols.num_rows
    if n == 0:
        return np.zeros(0, dtype=bool)
    return gathered(cols, ("model",), n, lambda model: model == index)


class Selected(Mapping[str, np.ndarray]):
    """The rows ``sel`` of every column, selected when a column (or a row chunk of it) is
    read."""

    def __init__(self, cols: Mapping[str, np.ndarray], sel: np.ndarray) -> None:
        self.cols = cols
        self.sel = sel

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name][self.sel]

    def row_chunks(self, names: tuple[str, ...], rows: int = STREAM_ROWS) -> Iterator[list]:
        """The selected rows of each row chunk of the underlying columns, in row order."""
        s = 0
        for chunk in column_chunks(self.cols, names, rows):
            k = len(chunk[0])
            sel = self.sel[s : s + k]
            s += k
            yield [c[sel] for c in chunk]

    def __iter__(self) -> Iterator[str]:
        return iter(self.cols)

    def __len__(self) -> int:
        return len(self.cols)


def latency_p95(cols: Mapping[str, np.ndarray], rows: int = STREAM_ROWS) -> dict[str, float | None]:
    """p95 TTFT and TPOT of the completed requests (TPOT: of those with > 1 output token),
    as :func:`~tidal.core.metrics.request_latencies` defines them; each gathered a row chunk
    at a time into one array (the values do not depend on ``rows``)."""
    n_done = n_many = 0
    for finish, out in column_chunks(cols, ("finish_ns", "output_tokens"), rows):
        done = finish >= 0
        n_done += int(done.sum())
        n_many += int((out[done] > 1).sum())
    names = ("first_token_ns", "arrival_ns", "finish_ns")
    ttft = _p95(gathered(cols, names, n_done, ttft_completed, rows))
    tpot = _p95(gathered(cols, tpot_columns(cols), n_many, tpot_completed, rows))
    return {"ttft_p95_s": ttft, "tpot_p95_s": tpot}
