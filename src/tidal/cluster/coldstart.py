"""The cold-start state machine (docs/research/warmserve.md §1.4 stages (a)–(e), §2.5, §4.1 item 5).

Stages: (a) worker + CUDA context, (b) engine process, (c) communication group (TP > 1),
(d) weights, (e) KV allocation. What is prewarmed skips a stage:

* vanilla engines (vLLM on Ray, ServerlessLLM) run them in sequence:
  ``worker → engine → group → load → kv_init``;
* with universal workers and unified memory (WarmServe) the engine track (a prewarmed process:
  argument handoff and init) runs beside the weights track (a warm replica: nothing; a loading
  one: its remaining transfer; a miss: a full load started at acquisition, then the group), and
  the instance is READY when both end, plus the KV stage — lazy mapping of the first batch's
  blocks with memory switching, mapping all KV pages without it.

:class:`StartupPlan` holds the durations one instance will pay; the controller runs it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StartupPlan:
    proc_s: float
    """Engine track: worker and engine (or handoff from the pool)."""
    sequential: bool
    """Weights load only after the engine track and the group (vanilla engines)."""
    group_s: float
    """Communication-group creation on the critical path (vanilla TP > 1)."""
    kv_s: float
    """KV stage after both tracks."""
    load: bool = True
    """Whether weights must be loaded at all (False for a warm replica)."""


def vanilla_plan(worker_s: float, engine_s: float, group_s: float, kv_init_s: float) -> StartupPlan:
    return StartupPlan(worker_s + engine_s, True, group_s, kv_init_s)


def unified_plan(proc_s: float, kv_s: float, load: bool) -> StartupPlan:
    return StartupPlan(proc_s, False, 0.0, kv_s, load)
