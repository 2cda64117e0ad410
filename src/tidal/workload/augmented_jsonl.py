"""Users' own augmented workloads: one JSON object per line (``--workload augmented:FILE``).

Schema (native form)::

    {"prompt_tokens": 812,
     "segments": [{"decode_tokens": 40, "call_s": 0.72, "return_tokens": 120},
                  {"decode_tokens": 25, "call_s": 0.50, "return_tokens": 64},
                  {"decode_tokens": 35}],
     "tool": "qa",           # optional: calculator qa ve chatbot image tts other
     "arrival_s": 0.0}       # optional: all lines or none

Every segment but the last is followed by a call (``call_s`` ≥ 0 seconds, ``return_tokens``
≥ 0); the last has neither. ``decode_tokens`` ≥ 1 and ``prompt_tokens`` ≥ 1.

INFERCEPT's form is accepted too (``docs/research/augserve.md`` §1.1): ``{"experiments":
[{"prompt_tokens": P, "completion_tokens": g_0, "api_time": T_0, "api_token_length": a_0},
…, {"completion_tokens": g_K}]}``; only the first experiment's ``prompt_tokens`` is used.

Arrivals: when every line has ``arrival_s`` the file is replayed (times non-decreasing, the
first re-based to 0, ``rate_scale`` divides them, ``num_requests`` keeps the first N).
Otherwise arrivals are Poisson at ``rate``; with ``num_requests`` the lines are sampled
uniformly with replacement (INFERCEPT's driver), without it each line is used once in file
order. Malformed input raises :class:`TraceError` naming the file, line and field.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from tidal.core.augmented import TOOLS, AugmentedSpec, ToolCall
from tidal.core.errors import ConfigError, TraceError
from tidal.core.units import NS_PER_S
from tidal.workload._io import MAX_SPAN_NS, MAX_SPAN_S, MAX_TOKENS, read_bytes, span_message
from tidal.workload.arrivals import arrival_times
from tidal.workload.augmented import cap_context, request_set_of
from tidal.workload.base import RequestSet
from tidal.workload.paths import resolve_trace


def _int(
    obj: dict[str, Any], key: str, where: str, line: int, minimum: int, prefix: str = ""
) -> int:
    field = prefix + key
    if key not in obj:
        raise TraceError(where, line, field, "missing key")
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise TraceError(where, line, field, f"expected an integer ≥ {minimum}, got {v!r}")
    if v != int(v) or v < minimum:
        raise TraceError(where, line, field, f"expected an integer ≥ {minimum}, got {v!r}")
    if v > MAX_TOKENS:
        raise TraceError(where, line, field, f"expected an integer ≤ {MAX_TOKENS}, got {v!r}")
    return int(v)


def _seconds(obj: dict[str, Any], key: str, where: str, line: int, prefix: str = "") -> int:
    field = prefix + key
    if key not in obj:
        raise TraceError(where, line, field, "missing key")
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        raise TraceError(where, line, field, f"expected seconds ≥ 0, got {v!r}")
    if v > MAX_SPAN_S:
        raise TraceError(where, line, field, f"expected seconds ≤ {MAX_SPAN_S:.4g}, got {v!r}")
    return round(float(v) * NS_PER_S)


def _segments(
    items: Any, where: str, line: int, field: str, keys: tuple[str, str, str]
) -> tuple[tuple[ToolCall, ...], int]:
    dec, call, ret = keys
    if not isinstance(items, list) or not items:
        raise TraceError(where, line, field, "expected a non-empty list of segments")
    calls: list[ToolCall] = []
    for i, seg in enumerate(items):
        here = f"{field}[{i}]"
        if not isinstance(seg, dict):
            raise TraceError(where, line, here, "expected a JSON object")
        last = i == len(items) - 1
        g = _int(seg, dec, where, line, 1, f"{here}.")
        if last:
            if sum(c.duration_ns for c in calls) > MAX_SPAN_NS:
                raise TraceError(
                    where, line, field, f"the calls last more than {MAX_SPAN_S:.4g} s in all"
                )
            if call in seg and seg[call] not in (0, None):
                raise TraceError(
                    where, line, f"{here}.{call}", "the last segment ends the request: no call"
                )
            return tuple(calls), g
        for k in (call, ret):
            if k not in seg:
                raise TraceError(
                    where,
                    line,
                    f"{here}.{k}",
                    "missing key (every segment but the last is followed by a call)",
                )
        t = _seconds(seg, call, where, line, f"{here}.")
        a = _int(seg, ret, where, line, 0, f"{here}.")
        calls.append(ToolCall(g, t, a))
    raise AssertionError("unreachable")


def parse_line(obj: Any, where: str, line: int) -> tuple[int, AugmentedSpec, float | None]:
    """One request: (prompt tokens, segments, arrival seconds or None)."""
    if not isinstance(obj, dict):
        raise TraceError(where, line, None, "expected a JSON object")
    tool = obj.get("tool", "other")
    if tool not in TOOLS:
        raise TraceError(where, line, "tool", f"unknown tool {tool!r} (valid: {', '.join(TOOLS)})")
    if "experiments" in obj:
        exps = obj["experiments"]
        if not isinstance(exps, list) or not exps or not isinstance(exps[0], dict):
            raise TraceError(where, line, "experiments", "expected a non-empty list of objects")
        prompt = _int(exps[0], "prompt_tokens", where, line, 1, "experiments[0].")
        calls, final = _segments(
            exps, where, line, "experiments", ("completion_tokens", "api_time", "api_token_length")
        )
    elif "segments" in obj:
        prompt = _int(obj, "prompt_tokens", where, line, 1)
        calls, final = _segments(
            obj["segments"], where, line, "segments", ("decode_tokens", "call_s", "return_tokens")
        )
    else:
        raise TraceError(where, line, "segments", "missing key (or give INFERCEPT 'experiments')")
    arrival = None
    if "arrival_s" in obj:
        v = obj["arrival_s"]
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise TraceError(where, line, "arrival_s", f"expected seconds ≥ 0, got {v!r}")
        arrival = float(v)
    return prompt, AugmentedSpec(calls, final, TOOLS.index(tool)), arrival


def read_augmented_jsonl(path: Path) -> list[tuple[int, int, AugmentedSpec, float | None]]:
    """(line, prompt, segments, arrival) per non-blank line."""
    where = str(path)
    text = read_bytes(path).decode("utf-8", errors="replace")
    out = []
    for line, raw in enumerate(text.split("\n"), start=1):  # physical lines: \n only
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise TraceError(where, line, None, f"not valid JSON: {exc.msg}") from None
        except RecursionError:
            raise TraceError(where, line, None, "not valid JSON: nested too deeply") from None
        out.append((line, *parse_line(obj, where, line)))
    if not out:
        raise TraceError(where, None, None, "the file holds no requests")
    return out


def load_augmented_jsonl(
    path: str | Path,
    rng: np.random.Generator,
    *,
    rate: float | None,
    num_requests: int | None,
    rate_scale: float = 1.0,
    arrival_cv: float = 1.0,
    max_context: int | None = 2048,
) -> RequestSet:
    """A user's augmented workload (module docstring: schema and arrival rules)."""
    p = resolve_trace(path, field="workload.augmented")
    rows = read_augmented_jsonl(p)
    where = str(p)
    has = [r[3] is not None for r in rows]
    if any(has) and not all(has):
        line = rows[has.index(False)][0]
        raise TraceError(where, line, "arrival_s", "missing key (give it on every line or none)")
    if all(has):
        t = np.array([r[3] for r in rows], dtype=np.float64)
        bad = np.flatnonzero(np.diff(t) < 0)
        if len(bad):
            raise TraceError(where, rows[int(bad[0]) + 1][0], "arrival_s", "arrival times decrease")
        rel = (t - t[0]) / rate_scale
        if rel[-1] > MAX_SPAN_S:
            i = int(np.argmax(rel > MAX_SPAN_S))
            message = span_message(f"{t[i]:g} s (÷ rate_scale {rate_scale:g})", float(rel[i]))
            raise TraceError(where, rows[i][0], "arrival_s", message)
        arrivals = np.rint(rel * NS_PER_S).astype(np.int64)
        chosen = rows if num_requests is None else rows[:num_requests]
        arrivals = arrivals[: len(chosen)]
        how = f"replayed, rate x{rate_scale:g}"
    else:
        if rate is None:
            raise ConfigError(
                "workload.rate",
                f"{p} has no arrival_s, so the workload needs a rate",
                "give --rate in req/s",
            )
        if num_requests is None:
            chosen = rows
        else:
            idx = rng.integers(0, len(rows), size=num_requests)
            chosen = [rows[int(i)] for i in idx]
        arrivals = arrival_times(len(chosen), rate * rate_scale, arrival_cv, rng)
        how = (
            f"Poisson at {rate * rate_scale:g} req/s"
            if arrival_cv == 1.0
            else (f"gamma cv {arrival_cv:g} at {rate * rate_scale:g} req/s")
        )
    prompts, specs = [], []
    for _, prompt, spec, _ in chosen:
        prompt, spec = cap_context(prompt, spec, max_context)
        prompts.append(prompt)
        specs.append(spec)
    source = f"augmented:{p} ({len(chosen)} requests, {how}, context ≤ {max_context})"
    return request_set_of(arrivals, prompts, specs, source)
