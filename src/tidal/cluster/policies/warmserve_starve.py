"""WarmServe's starvation guard (``docs/design/warmserve-high-rate.md#the-starvation-guard``,
the measurements behind it): hands the
peak-held instances of other models back to a model that cannot get its first or next GPU.

The peak rule (``peak_keep_s``) keeps ⌈peak / (h·B)⌉ instances of a model for a minute after a
burst. At high rates those held instances can take every GPU another model needs, and that
model's queue then grows without bound while the holders run far below B. The guard tells this
from ordinary contention by three conditions, checked every control period; a model m is
*starved* when

1. its oldest waiting request — the head of its router FIFO, or a request on the router's
   retry path (no serving instance) — has waited ≥ ``starve_wait_s`` (2 s) and, when
   ``starve_give_up_s`` > 0, at most that long (30 s; the fallback below);
2. none of its instances is starting (an activation under way is its next GPU), and no
   instance handed back to it is still draining;
3. some other model j holds instances above its need,
   ``need_j = ⌈max(avg_j, inflight_j) / (starve_fill · B)⌉`` (avg: the autoscaler's 5-s
   average; inflight: now, so a burst under way is not taken for an over-hold; at least one
   while j has a request in flight). j must not be starved itself.

Under sustained contention every model runs at or above its need (3 fails) and nothing is
handed back, however long the queues. When m is starved, the guard stops the instances (each
READY and past ``protect_s``) that free one group of m.tp GPUs on one node: on each node it
takes, one instance at a time, the fewest-in-flight instance of the model with the most
instances above its need ("most over-held first") until the node's idle GPUs plus the freed
ones reach m.tp, and it uses the node that needs the fewest stops (ties: the lowest node id).
(A split unit — two groups, ``cluster/placement_units.py`` — frees its larger group: a lower
bound; its acquire may still find no second group and waits for the next period.)
The stopped instances drain; when the last of them retires, m acquires at once (before any
other model's autoscaler or router sees the idle GPUs). One group per starved model per
period: a model short of several instances gets one more each period while it stays starved.
Starved models also come first in the autoscaler's scale-up order.

Give-up: a model whose oldest request has waited longer than ``starve_give_up_s`` is past
what one more instance mends — the cluster is past its capacity for that model (its backlog
grows in ServerlessLLM too) — and handing it the others' GPUs only moves the starvation to
them (a backlogged large model takes several small models' GPUs per hand-back). For such a
model the guard stands down, and the policy keeps the peak rule's holds exactly as without the
guard.

Triage (:mod:`tidal.cluster.policies.warmserve_triage`, ``triage_ratio``): when condition 3
fails for a model that has waited ``triage_wait_s`` (10 s), the model completing the fewest
requests per GPU gives it one instance instead (past capacity: someone's backlog grows anyway).

The guard is inactive with ``starve_wait_s: 0`` or ``peak_keep_s: 0`` (the artifact's rule
holds nothing beyond the average), so those configs run exactly as before it existed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from tidal.cluster.instance import ModelInstance, State
from tidal.cluster.policies.warmserve_triage import ServiceDensity
from tidal.cluster.view import ClusterView
from tidal.core.request import Request


class StarvationGuard:
    def __init__(
        self, view: ClusterView, wait_s: float, fill: float, window_ns: int, give_up_s: float
    ) -> None:
        self.view = view
        self.wait_ns = round(wait_s * 1e9)
        self.give_up_ns = round(give_up_s * 1e9)
        self.fill = fill
        self.window_ns = window_ns
        nm = len(view.models)
        self.retrying: list[dict[int, int]] = [{} for _ in range(nm)]
        """Per model, request id → arrival time of the requests on the router's retry path."""
        self.handback: dict[int, int] = {}
        """Instance id of a handed-back instance still draining → the model it was stopped for."""
        self.fired = 0
        """Instances handed back so far (a statistic)."""
        self.triage: ServiceDensity | None = None
        """Past-capacity triage (:mod:`tidal.cluster.policies.warmserve_triage`), when on."""
        self.triage_ratio = 0.0
        self.triage_wait_ns = 0
        self.triaged = 0
        """Instances handed back by triage (a statistic)."""

    # ------------------------------------------------------------------ waiting requests
    def routed(self, m: int, req: Request) -> None:
        self.retrying[m].pop(req.request_id, None)

    def retried(self, m: int, req: Request) -> None:
        self.retrying[m][req.request_id] = req.arrival_ns

    def any_waiting(self, queues: Sequence[Sequence[Request]]) -> bool:
        return any(queues) or any(self.retrying)

    def oldest(self, m: int, queue: Sequence[Request]) -> int | None:
        """Arrival time of model m's oldest waiting request (FIFO head or retry path)."""
        times = list(self.retrying[m].values())
        if queue:
            times.append(queue[0].arrival_ns)
        return min(times) if times else None

    # ------------------------------------------------------------------ detector
    def need(self, m: int, now_ns: int, batch: int) -> int:
        """Instances model m's load asks for at ``fill``·B: ⌈max(5-s average, in flight now)
        / (fill · B)⌉, at least one while it has a request in flight (B per decode engine of a
        disaggregated unit)."""
        load = self.view.loads[m]
        avg = max(load.avg_load(now_ns, self.window_ns), load.inflight)
        b = batch * self.view.models[m].slots
        return max(math.ceil(avg / (self.fill * b)), 1 if load.inflight else 0)

    def starved(self, queues: Sequence[Sequence[Request]], now_ns: int) -> list[int]:
        """Models meeting conditions 1–2 (module docstring), longest-waiting first."""
        pending = set(self.handback.values())
        out: list[tuple[int, int]] = []
        for m, insts in enumerate(self.view.serving):
            t0 = self.oldest(m, queues[m])
            if t0 is None or now_ns - t0 < self.wait_ns:
                continue
            if self.give_up_ns and now_ns - t0 > self.give_up_ns:
                continue  # past what one more instance mends
            if m in pending or any(i.state == State.STARTING for i in insts):
                continue
            out.append((t0, m))
        return [m for _, m in sorted(out)]

    def excess(self, m: int, now_ns: int, batch: int, skip: set[int]) -> dict[int, int]:
        """Condition 3: each other model's instances above its need (none in ``skip``)."""
        out: dict[int, int] = {}
        for j, insts in enumerate(self.view.serving):
            if j == m or j in skip:
                continue
            extra = len(insts) - self.need(j, now_ns, batch)
            if extra > 0:
                out[j] = extra
        return out

    def victims(
        self, m: int, excess: dict[int, int], now_ns: int, protect_ns: int
    ) -> list[ModelInstance]:
        """The instances (of the models in ``excess``, at most that many each) to stop so that
        one node has m.tp idle GPUs, by the choice rule of the module docstring; empty when
        no node can get there."""
        view = self.view
        tp = max(view.models[m].groups)  # (a split unit: its larger group, a lower bound)
        if not excess:
            return []
        best: list[ModelInstance] | None = None
        for node in range(view.topo.num_nodes):
            have = len(view.idle_gpus(node))
            left = dict(excess)
            pool = {
                j: sorted(
                    (
                        i
                        for i in view.serving[j]
                        if i.state == State.READY
                        and now_ns - i.created_ns > protect_ns
                        and view.topo.node_of(i.gpus[0]) == node
                    ),
                    key=lambda i: (i.inflight, i.iid),
                )
                for j in excess
            }
            chosen: list[ModelInstance] = []
            while have < tp:
                cands = [j for j in left if left[j] > 0 and pool[j]]
                if not cands:
                    break
                j = max(cands, key=lambda j: (left[j], -j))
                inst = pool[j].pop(0)
                left[j] -= 1
                chosen.append(inst)
                have += len(inst.gpus)
            if have >= tp and (best is None or len(chosen) < len(best)):
                best = chosen
        return best or []

    def hand_back(
        self,
        queues: Sequence[Sequence[Request]],
        now_ns: int,
        batch: int,
        protect_ns: int,
        stop: Callable[[ModelInstance, int], None],
    ) -> None:
        """One control period: for each starved model, stop the other models' over-held
        instances that free one group of its GPUs (recorded before stopping: an idle one
        retires inside ``stop`` and :meth:`retired` must see the whole group)."""
        starved = self.starved(queues, now_ns)
        if starved and self.triage is not None:
            self.triage.advance(now_ns)
        for m in starved:
            excess = self.excess(m, now_ns, batch, set(starved))
            donor = None if excess else self._donor(m, queues[m], now_ns, set(starved))
            if donor is not None:
                excess = {donor: 1}
            victims = self.victims(m, excess, now_ns, protect_ns)
            self.triaged += len(victims) if donor is not None else 0
            self.record(victims, m)
            for inst in victims:
                stop(inst, now_ns)

    def _donor(self, m: int, queue: Sequence[Request], now_ns: int, skip: set[int]) -> int | None:
        """Past-capacity triage (:mod:`~tidal.cluster.policies.warmserve_triage`): the model to
        give m one instance, once m's oldest request has waited ``triage_wait_s``."""
        t0 = self.oldest(m, queue)
        if self.triage is None or t0 is None or now_ns - t0 < self.triage_wait_ns:
            return None
        return self.triage.donor(m, skip, self.triage_ratio)

    def record(self, insts: list[ModelInstance], m: int) -> None:
        for inst in insts:
            self.handback[inst.iid] = m
        self.fired += len(insts)

    def retired(self, inst: ModelInstance) -> int | None:
        """The model to acquire for once ``inst`` retires: its last handed-back instance."""
        m = self.handback.pop(inst.iid, None)
        if m is None or m in self.handback.values():
            return None
        return m
