"""Retiring a drained instance: its engine, KV pages, loads and GPUs freed; its weights kept as
a warm replica when the policy keeps them (warm scale-down, docs/research/warmserve.md §2.5).

Called by :class:`tidal.cluster.controller.ClusterController` once a stopping instance has no
request in flight; idempotent. Weights loaded only in part (a load cancelled here) are released.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidal.cluster.instance import ModelInstance, Replica, State

if TYPE_CHECKING:
    from tidal.cluster.controller import ClusterController


def retire(ctl: ClusterController, inst: ModelInstance, now_ns: int) -> None:
    """Free ``inst`` (state STOPPED), archive it in the ledger and tell the policy."""
    if inst.state == State.STOPPED or inst.inflight:
        return
    inst.state = State.STOPPED
    inst.stopped_ns = now_ns
    ctl.version += 1
    del ctl.live[inst.iid]
    if inst.engine >= 0:
        ctl.backend.release_engine(inst.engine)
    ctl.memory.release(now_ns, inst.gpus, ("kv", inst.iid))
    wkey = ("w", inst.iid)
    partial = False
    for tr in inst.transfers:
        if tr.active:
            ctl.transfers.cancel(now_ns, tr)
            ctl.loads_cancelled += 1
            partial = True
    ctl._set_busy(now_ns, inst.gpus, None)
    if (
        not partial
        and inst.ready_ns >= 0
        and ctl.policy.keep_weights(inst)
        and ctl.memory.holds(inst.gpus[0], wkey)
    ):
        r = Replica(ctl._next_rid, inst.model, inst.gpus, now_ns, warm=True, warm_ns=now_ns)
        ctl._next_rid += 1
        ctl.memory.retag(now_ns, inst.gpus, wkey, r.owner, "prewarm")
        ctl._attach_replica(r)
    else:
        ctl.memory.release(now_ns, inst.gpus, wkey)
    ctl.ledger.archive(inst)
    inst.kv = None
    inst.transfers = []
    ctl.policy.on_stopped(inst, now_ns)
