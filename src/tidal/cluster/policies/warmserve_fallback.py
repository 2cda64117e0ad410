"""WarmServe's overload fallback: past the cluster's capacity WarmServe switches its
autoscaling, holding and routing to ServerlessLLM's rules
(:mod:`tidal.cluster.policies.serverlessllm`) and back when the backlog clears. The
measurements behind it, and why it is off by default:
``docs/design/warmserve-high-rate.md#the-overload-fallback-serverlessllms-rules-past-capacity``.

Detector (every control period, from the starvation guard's record of waiting requests: each
model's router FIFO head and its requests on the retry path): ``wait`` = the longest any
model's oldest waiting request has waited.

* engage when ``wait > overload_enter_s`` (20 s: a backlog the guard's hand-backs, which act
  within seconds, have not cleared; a shorter threshold also engages where WarmServe's own
  rules would hold, a longer one too late to change the outcome);
* disengage when ``wait < overload_exit_s`` (2 s = ``starve_wait_s``: no model waits longer
  than ordinary contention) and the fallback has been engaged for ``overload_hold_s``.

The gap between the two thresholds (and the hold) is the hysteresis: a backlog that drains
below 20 s but not to 2 s keeps the baseline's rules.

Engaged, ServerlessLLM's rules replace WarmServe's (the cold-start mechanisms — warm
replicas, engine pool, memory switching, prewarming, KV reservation — stay WarmServe's):

* autoscaler, every ``serverlessllm.loop_s`` per model: desired = clamp(⌈in-flight /
  target⌉, min, max); one instance acquired per loop while desired exceeds the serving ones;
  one READY instance (the newest) stopped per loop when desired is lower and no request
  arrived for ``keep_alive_s`` (the idle timer grows by one loop per such loop and resets at
  every arrival). No peak rule, no starvation guard, no 5-s average.
* router: every request joins its model's FIFO, whose head goes round-robin to a READY
  instance below ``instance_cap``; no instance is acquired on the request path and a model with
  no instance keeps its FIFO (its autoscaler creates one) instead of the retry path.
"""

from __future__ import annotations

from collections.abc import Callable

from tidal.cluster.config import ServerlessLLMConfig
from tidal.cluster.instance import ModelInstance
from tidal.cluster.models import ServedModel
from tidal.cluster.policies.common import scale_step
from tidal.cluster.view import ClusterView
from tidal.core.units import s_to_ns


class OverloadFallback:
    def __init__(
        self,
        view: ClusterView,
        sl: ServerlessLLMConfig,
        enter_s: float,
        exit_s: float,
        hold_s: float,
    ) -> None:
        self.view = view
        self.sl = sl
        self.enter_ns = s_to_ns(enter_s)
        self.exit_ns = s_to_ns(exit_s)
        self.hold_ns = s_to_ns(hold_s)
        self.loop_ns = s_to_ns(sl.loop_s)
        self.engaged = False
        self.since_ns = 0
        self.next_loop_ns = 0
        self.idle_s = [0.0] * len(view.models)
        """ServerlessLLM's per-model idle timer (reset at every arrival)."""
        self.engagements = 0
        """Times the fallback engaged (a statistic)."""
        self.engaged_ns = 0
        """Total time engaged up to the last disengagement (a statistic)."""

    def arrived(self, m: int) -> None:
        self.idle_s[m] = 0.0

    def update(self, wait_ns: int, now_ns: int) -> bool:
        """Apply the detector to the longest current wait; True when the mode changed."""
        if not self.engaged and wait_ns > self.enter_ns:
            self.engaged, self.since_ns, self.next_loop_ns = True, now_ns, now_ns
            self.engagements += 1
            return True
        if self.engaged and wait_ns < self.exit_ns and now_ns - self.since_ns >= self.hold_ns:
            self.engaged = False
            self.engaged_ns += now_ns - self.since_ns
            return True
        return False

    def autoscale(
        self,
        now_ns: int,
        acquire: Callable[[ServedModel, int], ModelInstance | None],
        stop: Callable[[ModelInstance, int], None],
    ) -> None:
        """ServerlessLLM's autoscaler loop (module docstring), at most once per ``loop_s``."""
        if now_ns < self.next_loop_ns:
            return
        self.next_loop_ns = now_ns + self.loop_ns
        for m in range(len(self.view.models)):
            scale_step(self.view, self.sl, self.idle_s, m, now_ns, acquire, stop)
