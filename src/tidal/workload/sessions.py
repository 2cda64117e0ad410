"""Multi-turn sessions: turn k's prompt is turn k−1's prompt, its answer, then new user tokens.

``num_requests`` turns in ``ceil(num_requests / turns)`` sessions; sessions start at the
configured arrival process (``rate``, ``arrival_cv``); turn k > 0 is sent a think time after
turn k−1 finished (exponential, mean ``think_time_s``), so its arrival is not known in advance:
the simulator releases it (closed loop per session, :class:`tidal.sim.simulator.ArrivalStream`).
Columns: ``arrival_ns`` holds the session start (a lower bound, non-decreasing),
``prev_turn`` the distance in rows to the previous turn (0: none) and ``think_ns``.

Content (prefix caching): request i's segments are, for its session's turns j ≤ k, the user
tokens ``u_j`` (id ``2i_j``) and the answer ``o_j`` (id ``2i_j + 1``), optionally after a shared
system prompt; its own answer ends the content, so the tokens it generates are cached under
that id and the next turn can reuse them (vLLM caches generated blocks the same way).
Lengths: ``(u_k, o_k)`` pairs from ``length_dist`` (the prompt length stands for u).
Agent chains (``handoff``): ``kv`` is the above; ``text`` gives turn k the same number of
tokens as one segment of its own (its instruction, then the history re-sent as text), so
nothing is reused (Agent Primitives' text-based multi-agent baseline, arXiv 2602.03695).
"""

from __future__ import annotations

import math

import numpy as np

from tidal.core.errors import ConfigError
from tidal.core.units import NS_PER_S
from tidal.workload._io import MAX_SPAN_NS, MAX_SPAN_S
from tidal.workload.arrivals import arrival_times
from tidal.workload.base import RequestSet
from tidal.workload.config import WorkloadConfig
from tidal.workload.content import PrefixContent
from tidal.workload.lengths import config_lengths

_SYSTEM_ID = 1 << 40
"""Ids of shared system prompts (group g has id _SYSTEM_ID + g), apart from turn ids."""
_TEXT_ID = 1 << 42
"""Ids of the text handoffs (request i: _TEXT_ID + i), never shared."""


def _check_span(
    start: np.ndarray, think_s: np.ndarray, turn: np.ndarray, session: np.ndarray, mean: float
) -> None:
    """A session's start plus its think times must stay within :data:`MAX_SPAN_NS` (the
    simulator adds them to int64 ns finish times); else :class:`ConfigError` naming
    ``think_time_s``."""
    if len(think_s) == 0:
        return
    waits = np.bincount(session, weights=np.where(turn > 0, think_s, 0.0))
    worst = start[: len(waits)] / NS_PER_S + waits
    if not float(worst.max()) * NS_PER_S <= MAX_SPAN_NS:
        raise ConfigError(
            "workload.think_time_s",
            f"think times of mean {mean:g} s make a session last {float(worst.max()):.3g} s, "
            f"beyond the {MAX_SPAN_S:.3g} s a run may span in integer nanoseconds",
            "lower think_time_s (--think-time) or the number of turns",
        )


def sessions(cfg: WorkloadConfig, rng: np.random.Generator) -> RequestSet:
    n, turns = cfg.num_requests or 0, cfg.turns
    num_sessions = -(-n // turns)
    rate = math.inf if cfg.rate is None else cfg.rate * cfg.rate_scale
    start = arrival_times(num_sessions, rate, cfg.arrival_cv, rng)
    user, out = config_lengths(cfg, n, rng)
    think_s = rng.exponential(cfg.think_time_s, n)
    turn = np.arange(n) % turns
    session = np.arange(n) // turns
    _check_span(start, think_s, turn, session, cfg.think_time_s)
    think = np.rint(think_s * NS_PER_S).astype(np.int64)
    shared = cfg.shared_prefix_len if cfg.shared_prefix_groups else 0
    group = rng.integers(max(cfg.shared_prefix_groups, 1), size=num_sessions)
    ids: list[int] = []
    lens: list[int] = []
    count = np.zeros(n, dtype=np.int64)
    prompt = np.zeros(n, dtype=np.int64)
    for i in range(n):
        k = int(turn[i])
        first = i - k
        segs_i, lens_i = [], []
        if shared:
            segs_i.append(_SYSTEM_ID + int(group[session[i]]))
            lens_i.append(shared)
        if cfg.handoff == "text" and k > 0:
            # the instruction first, then the history as text: same tokens, no shared prefix
            history = sum(int(user[j]) + int(out[j]) for j in range(first, i)) + int(user[i])
            segs_i += [_TEXT_ID + i, 2 * i + 1]
            lens_i += [history, int(out[i])]
        else:
            for j in range(first, i + 1):
                segs_i += [2 * j, 2 * j + 1]
                lens_i += [int(user[j]), int(out[j])]
        ids += segs_i
        lens += lens_i
        count[i] = len(segs_i)
        prompt[i] = sum(lens_i) - int(out[i])
    content = PrefixContent.from_segments(np.array(ids), np.array(lens), count)
    extra = {"prev_turn": np.where(turn > 0, 1, 0).astype(np.int64), "think_ns": think}
    extra["think_ns"][turn == 0] = 0
    source = (
        f"sessions: {n} turns in {num_sessions} sessions of up to {turns}, think time "
        f"{cfg.think_time_s:g} s, starts at {rate:g} sessions/s, lengths {cfg.length_dist}"
    )
    return RequestSet(start[session], prompt, out, source, extra, content=content)
