"""A disaggregated prefill/decode deployment in one event loop: the pull path of vLLM's
NixlConnector (docs/design/disaggregation-speculation.md §1.3–1.4).

Instances 0…P−1 are the prefill pool, P…P+D−1 the decode pool (``sim/deployment.py``). A
request's path:

1. arrival → router over the prefill pool → the **prefill leg**, the request with
   ``max_tokens = 1``, on prefill instance i (chunked prefill, prefix caching, any policy);
2. the leg samples its token and finishes; its blocks stay held (:class:`HeldBlocks`) and the
   hand-off is a timer at the same instant (priority 1: after every step end of that instant,
   so a decode step that starts then does not see it — the rule fast-forward cuts by);
3. router over the decode pool → the **decode leg** (the request with its full output length)
   is delivered to decode instance j and queued; when admission reaches it, it reuses the
   prefix j's cache holds, takes blocks for the rest of its prompt (:class:`RemoteKV`) and the
   transfer of the missing tokens' KV starts on the links ``tx:p{i}`` → ``rx:d{j}``
   (``cluster/links.py``, max-min shared); ``deployment.request_overhead_ms``, if set, delays
   the delivery (the serving path's per-request latency, ``sim/disagg_overhead.py``);
4. transfer end (+ the link's latency): the prefill blocks are released (the instance is woken),
   the decode leg is loaded and its instance notified; the next step recomputes the last prompt
   token (1-token chunk) and samples the first output token — the client's first token.

Exactness: prefill instances never fast-forward (their requests leave at their first token);
decode instances get work only by :meth:`Simulation.deliver` and :meth:`Simulation.notify`,
both of which cut a run where stepping would first see the work, so their horizon is infinite;
their queue lets arrivals jump the head (a loaded leg needs no block), so their runs stay
interruptible unless the running set is full (then nothing can be admitted until a departure,
which ends the run anyway).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from tidal.cluster.links import pool_links, resolve_link
from tidal.hardware.gpus import get_gpu
from tidal.sim.config import SimulationConfig
from tidal.sim.deployment import pool_config
from tidal.sim.disagg_augment import decode_horizon, plain_prefill
from tidal.sim.disagg_metrics import DisaggColumns, disagg_result
from tidal.sim.disagg_overhead import overhead_ns
from tidal.sim.disagg_push import PushWiring
from tidal.sim.disagg_wiring import DisaggWiring, never, prefill_leg
from tidal.sim.instance import SimInstance
from tidal.sim.recorder import RequestRecorder
from tidal.sim.routers import make_router
from tidal.sim.simulator import Simulation
from tidal.sim.single import SimResult, build_instance, check_context, load_instance_requests
from tidal.workload.base import RequestSet
from tidal.workload.content import unique_content


def run_disaggregated(
    cfg: SimulationConfig,
    requests: RequestSet | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SimResult:
    """Simulate ``cfg``'s disaggregated deployment on its workload (module docstring)."""
    assert cfg.deployment is not None
    dep = cfg.deployment
    t0 = time.perf_counter()
    reqs = requests if requests is not None else load_instance_requests(cfg)
    augmented = cfg.workload.augmented is not None
    if augmented and cfg.augment.prefix_caching and reqs.content is None:
        reqs = dataclasses.replace(reqs, content=unique_content(reqs.prompt_len))
    t_load = time.perf_counter()
    check_context(cfg.model_spec(), reqs)
    pcfg, dcfg = plain_prefill(pool_config(cfg, "prefill")), pool_config(cfg, "decode")
    content = reqs.content is not None
    longest = int((reqs.prompt_len + reqs.output_len + reqs.extra.get("return_tokens", 0)).max())
    pre = [build_instance(pcfg, int(reqs.prompt_len.max()) + 1, content) for _ in range(
        dep.prefill.instances)]  # fmt: skip
    dec = [build_instance(dcfg, longest, content) for _ in range(dep.decode.instances)]
    recorder = RequestRecorder(reqs)
    n = len(reqs)
    cb = (lambda done: progress(done, n)) if progress is not None else None
    sim = Simulation([], reqs, recorder, cfg.workload.concurrency, progress=cb)
    n_pre = len(pre)
    if augmented:  # decode instances stop at their own call returns
        sim.horizon = decode_horizon(sim, n_pre)
    else:
        sim.horizon = lambda idx: sim.next_external_ns if idx < n_pre else never
    insts = [SimInstance(i, s, p, cfg.fast_forward) for i, (s, p, _) in enumerate(pre + dec)]
    for inst in insts:
        sim.add_instance(inst)
    p_insts, d_insts = insts[:n_pre], insts[n_pre:]
    handoff = overhead_ns(dep.request_overhead_ms, dcfg.engine)
    cols = DisaggColumns(n, dep.kv_transfer.protocol == "push", handoff > 0)
    wiring = _wire(cfg, sim, (pcfg, p_insts), (dcfg, d_insts), cols, reqs.output_len)
    wiring.handoff_ns = handoff
    default = sim.make_request
    sim.make_request = lambda rid, t: prefill_leg(default(rid, t))
    sim.run()
    t_sim = time.perf_counter()
    timing = {
        "wall_s": t_sim - t0,
        "load_s": t_load - t0,
        "simulate_s": t_sim - t_load,
        "num_events": sim.num_events,
        "simulated_requests_per_s": n / max(t_sim - t_load, 1e-9),
    }
    pools = {"prefill": (pcfg, p_insts, pre), "decode": (dcfg, d_insts, dec)}
    return disagg_result(cfg, recorder, cols, pools, wiring, sim.now_ns, timing)


def _wire(
    cfg: SimulationConfig,
    sim: Simulation,
    prefill: tuple[SimulationConfig, list[SimInstance]],
    decode: tuple[SimulationConfig, list[SimInstance]],
    cols: DisaggColumns,
    output_len: Any,
) -> DisaggWiring:
    """The link between the pools, the wiring of the run's protocol attached to every
    instance, and the simulation's router (over the prefill pool; push: both pools)."""
    assert cfg.deployment is not None
    dep, (pcfg, p_insts), (dcfg, d_insts) = cfg.deployment, prefill, decode
    n_pre, n_dec = len(p_insts), len(d_insts)
    # every GPU of both pools counts towards one node (an instance is tp × dp GPUs); a
    # transfer moves over the tp ports of the DP rank that holds the request's KV
    gpus = n_pre * pcfg.tp * pcfg.data_parallel_size + n_dec * dcfg.tp * dcfg.data_parallel_size
    link = resolve_link(
        dep.kv_transfer.link, get_gpu(pcfg.gpu), get_gpu(dcfg.gpu), gpus,
        dep.kv_transfer.bandwidth_gbs, dep.kv_transfer.latency_us, dep.kv_transfer.efficiency,
    )  # fmt: skip
    per_gpu = dcfg.model_spec().kv_bytes_per_token_per_gpu(dcfg.tp)
    args = (sim, p_insts, d_insts, link, (per_gpu, dcfg.tp), cols, output_len, dep.router)
    route = make_router(dep.router, p_insts) if n_pre > 1 else None
    wiring: DisaggWiring
    if dep.kv_transfer.protocol == "push":
        wiring = pushed = PushWiring(*args, layers=dcfg.model_spec().num_layers)
        pushed.route_prefill = route
        route = pushed.route
    else:
        wiring = DisaggWiring(*args)
    wiring.set_capacities(pool_links(link, n_pre, pcfg.tp, n_dec, dcfg.tp))
    for i, inst in enumerate(p_insts):
        wiring.attach_prefill(i, inst)
    for j, inst in enumerate(d_insts):
        wiring.attach_decode(j, inst)
    sim.route = route
    return wiring
