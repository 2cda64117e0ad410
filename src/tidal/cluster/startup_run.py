"""Running a cold start's :class:`~tidal.cluster.coldstart.StartupPlan` for one instance with timers
and weight transfers (docs/research/warmserve.md §4.1): it calls the controller back when ready."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidal.cluster.coldstart import StartupPlan
from tidal.cluster.instance import ModelInstance, Replica, State
from tidal.cluster.weight_load import load_weights
from tidal.core.units import s_to_ns

if TYPE_CHECKING:
    from tidal.cluster.controller import ClusterController


def run_startup_plan(
    ctl: ClusterController,
    inst: ModelInstance,
    plan: StartupPlan,
    replica: Replica | None,
    now_ns: int,
) -> None:
    """Run ``inst``'s cold start: the engine process track and the weights track (a loading
    ``replica`` taken over, a new load, or none), in parallel or (``plan.sequential``) one after
    the other; the instance is ready ``plan.kv_s`` after the last track ends."""
    kv_ns = s_to_ns(plan.kv_s)

    def track_done(name: str, t: int) -> None:
        inst.waiting_for.discard(name)
        if not inst.waiting_for and inst.state != State.STOPPED:
            ctl.at(t + kv_ns, lambda t2: ctl._ready(inst, t2))

    if plan.sequential:
        inst.waiting_for = {"seq"}

        def after_proc(t: int) -> None:
            if inst.state == State.STOPPED:
                return
            if plan.load:
                inst.transfers = load_weights(
                    ctl,
                    inst.model,
                    inst.gpus,
                    ("w", inst.iid),
                    t,
                    lambda t2: track_done("seq", t2),
                )
            else:
                track_done("seq", t)

        ctl.at(now_ns + s_to_ns(plan.proc_s + plan.group_s), after_proc)
        return
    inst.waiting_for = {"proc", "weights"}
    ctl.at(now_ns + s_to_ns(plan.proc_s), lambda t: track_done("proc", t))
    if replica is not None and not replica.warm:
        replica.on_warm = lambda t: track_done("weights", t)
        inst.transfers = replica.transfers
    elif replica is None and plan.load:
        r = ctl._new_replica(inst.model, inst.gpus, now_ns, owner=("w", inst.iid))
        r.consumer = inst
        r.on_warm = lambda t: track_done("weights", t)
        inst.transfers = r.transfers
    else:
        track_done("weights", now_ns)
