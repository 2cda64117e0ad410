"""One real-engine run of a fidelity comparison (:mod:`tidal.experiments.fidelity`)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from tidal.core.request import Request


def real_run(
    rt_cfg: Any,
    reqs: Any,
    prompts: list[list[int]],
    sim_cfg: Any,
    clock: str,
    speed: Any = None,
) -> dict[str, Any]:
    """One real-engine replay of ``reqs`` (open-loop arrivals on ``clock``): its request
    columns, metrics (the simulator's :func:`~tidal.core.metrics.summarize`, ITL weighted by
    decode tokens), the scheduler's share of step time, and speed probes before and after."""
    # lazy: keeps tidal --help fast
    from tidal.core.histogram import LogHistogram
    from tidal.core.metrics import summarize
    from tidal.runtime.config import build_engine  # lazy: keeps tidal --help fast

    # lazy: loads torch, the engine extra
    from tidal.runtime.driver import EngineDriver
    from tidal.runtime.profiling import probe, warm_up
    from tidal.sim.recorder import RequestRecorder  # lazy: keeps tidal --help fast

    rt = build_engine(rt_cfg)
    driver = EngineDriver(rt)
    warm_up(rt, clock)
    probe_before = probe(rt, clock)
    speed_before = speed(rt) if speed is not None else None
    eng = rt.engine
    eng.schedule_ns = eng.execute_ns = eng.update_ns = 0
    recorder = RequestRecorder(reqs)
    arrivals = reqs.arrival_ns.tolist()
    outputs = reqs.output_len.tolist()
    requests = [
        Request(i, arrivals[i], len(p), outputs[i], token_ids=list(p))
        for i, p in enumerate(prompts)
    ]
    steps: list = []
    t0 = time.perf_counter()
    driver.replay(requests, recorder.on_finish, steps=steps, clock=clock)
    wall = time.perf_counter() - t0
    speed_after = speed(rt) if speed is not None else None
    probe_after = probe(rt, clock)

    periods = np.array([r.period_ns for r in steps], dtype=np.int64)
    itl = LogHistogram()  # a step's duration, weighted by its decode tokens (as the simulator)
    for r in steps:
        if r.shape.num_decodes:
            itl.add(r.period_ns, r.shape.num_decodes)
    cols = recorder.columns()
    slo = sim_cfg.slo
    metrics = summarize(cols, slo.ttft_s, slo.tpot_s, itl)
    # the policy's own counters (EB⁺: mode switches, time in EB), warm-up and probes included
    for k, v in rt.scheduler.extra_metrics().items():
        metrics.setdefault(k, v)
    n = max(len(steps), 1)
    step_ns = eng.schedule_ns + eng.execute_ns + eng.update_ns
    overhead = {
        "num_steps": len(steps),
        "schedule_us_per_step": eng.schedule_ns / n / 1e3,
        "update_us_per_step": eng.update_ns / n / 1e3,
        "execute_us_per_step": eng.execute_ns / n / 1e3,
        "step_period_us_mean": float(periods.mean() / 1e3) if len(periods) else 0.0,
        "scheduler_share_of_step": (eng.schedule_ns + eng.update_ns) / max(step_ns, 1),
    }
    return {
        "columns": cols,
        "metrics": metrics,
        "overhead": overhead,
        "wall_s": wall,
        "probe_s": (probe_before + probe_after) / 2,
        "probe_before_s": probe_before,
        "probe_after_s": probe_after,
        "speed_before": speed_before,
        "speed_after": speed_after,
    }
