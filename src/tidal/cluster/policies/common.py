"""Pieces several policies share: request routing (the artifact's least-loaded and first-fit,
ServerlessLLM's round-robin), ServerlessLLM's autoscaler step and aligned GPU groups."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from tidal.cluster.instance import State

if TYPE_CHECKING:
    from tidal.cluster.config import ServerlessLLMConfig
    from tidal.cluster.instance import ModelInstance
    from tidal.cluster.models import ServedModel
    from tidal.cluster.view import ClusterView


def least_loaded(instances: Sequence[ModelInstance]) -> ModelInstance | None:
    """The instance with the fewest in-flight requests among those below their cap (first of
    equals, in creation order) — WarmServe's ``schedule`` (docs/research/warmserve.md §2.6)."""
    best = None
    for inst in instances:
        if inst.inflight < inst.cap and (best is None or inst.inflight < best.inflight):
            best = inst
    return best


def first_below_cap(instances: Sequence[ModelInstance]) -> ModelInstance | None:
    """The first instance below its cap — MuxServe's routing (docs/research/warmserve.md §3.5)."""
    for inst in instances:
        if inst.inflight < inst.cap:
            return inst
    return None


class RoundRobin:
    """Per model, round-robin over its READY instances below a cap, resuming after the last
    pick (ServerlessLLM's router; WarmServe's below B): a burst of arrivals spreads over the
    instances instead of piling onto one instance's next prefill."""

    def __init__(self, num_models: int) -> None:
        self.next = [0] * num_models

    def pick(
        self, m: int, instances: Sequence[ModelInstance], cap: int | None = None
    ) -> ModelInstance | None:
        """The first READY instance below ``cap`` (default: its own) from model ``m``'s
        position on, which moves past it; None if every ready instance is full."""
        ready = [i for i in instances if i.state == State.READY]
        n = len(ready)
        for k in range(n):
            inst = ready[(self.next[m] + k) % n]
            if inst.inflight < (inst.cap if cap is None else cap):
                self.next[m] = (self.next[m] + k + 1) % n
                return inst
        return None


def aligned_group(view: ClusterView, tp: int, free: set[int]) -> tuple[int, ...] | None:
    """The first group of ``tp`` GPUs of one node, aligned to ``tp`` (offsets 0, tp, 2tp, …),
    all in ``free`` — a static layout in which groups of equal size never straddle."""
    per = view.topo.gpus_per_node
    for node in range(view.topo.num_nodes):
        base = node * per
        for off in range(0, per - tp + 1, tp):
            group = tuple(range(base + off, base + off + tp))
            if all(g in free for g in group):
                return group
    return None


def scale_step(
    view: ClusterView,
    sl: ServerlessLLMConfig,
    idle_s: list[float],
    m: int,
    now_ns: int,
    create: Callable[[ServedModel, int], ModelInstance | None],
    stop: Callable[[ModelInstance, int], None],
) -> None:
    """One autoscaler loop for model ``m`` (module docstring): desired =
    clamp(⌈in flight / target⌉, min, max) instances; one more if below it, one fewer (the
    newest ready) once ``keep_alive_s`` of loops have passed above it; ``idle_s[m]`` counts
    those loops."""
    count = view.loads[m].inflight
    target = sl.target * view.models[m].slots  # (a disaggregated unit: per decode engine)
    desired = min(sl.max_instances, max(sl.min_instances, math.ceil(count / target)))
    current = len(view.serving[m])
    if desired > current:
        create(view.models[m], now_ns)
    elif desired < current:
        if idle_s[m] >= sl.keep_alive_s:
            ready = [i for i in view.serving[m] if i.state == State.READY]
            if ready:
                stop(ready[-1], now_ns)
            idle_s[m] = 0.0
        else:
            idle_s[m] += sl.loop_s
