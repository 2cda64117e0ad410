"""``dedicated``: each model owns a fixed set of instances on its own GPUs for the whole run.

Sizing: one instance per model (largest group first, so aligned groups fit; a split unit's two
groups by :func:`tidal.cluster.placement_units.place_groups`), then one more at a time
to the model with the highest expected load per instance (``demand / instances``, demand = the
workload's mean in-flight load) while an aligned group is free. Routing: the least-loaded
instance below B, else retry every second (the artifact's router without creation).
"""

from __future__ import annotations

from collections.abc import Sequence

from tidal.cluster.coldstart import vanilla_plan
from tidal.cluster.placement_units import aligned_free, place_groups
from tidal.cluster.policies.base import PLACEMENTS, ClusterPolicy
from tidal.cluster.policies.common import least_loaded
from tidal.cluster.view import ClusterView, LaunchParams
from tidal.core.errors import ConfigError
from tidal.core.request import Request


def size_dedicated(view: ClusterView, demand: Sequence[float]) -> list[tuple[int, tuple[int, ...]]]:
    """(model index, GPU group) of every dedicated instance."""
    free = set(range(view.topo.num_gpus))
    out: list[tuple[int, tuple[int, ...]]] = []
    count = [0] * len(view.models)
    pick = aligned_free(view.topo, free.__contains__)
    nodes = view.topo.num_nodes
    for m in sorted(view.models, key=lambda m: (-max(m.groups), -m.tp, m.index)):
        group = place_groups(m, nodes, pick)
        if group is None:
            raise ConfigError(
                "cluster.models",
                f"dedicated placement cannot give {m.name} its {m.tp} GPUs on {view.cfg.spec}",
                "use fewer models or a larger cluster",
            )
        free -= set(group)
        out.append((m.index, group))
        count[m.index] += 1
    while True:
        order = sorted(view.models, key=lambda m: (-demand[m.index] / count[m.index], m.index))
        for m in order:
            group = place_groups(m, nodes, pick)
            if group is not None:
                free -= set(group)
                out.append((m.index, group))
                count[m.index] += 1
                break
        else:
            return out


@PLACEMENTS.register("dedicated")
class Dedicated(ClusterPolicy):
    name = "dedicated"

    def setup(self, now_ns: int) -> None:
        st = self.cfg.startup
        for m, group in size_dedicated(self.view, self.view.demand):
            model = self.view.models[m]
            plan = vanilla_plan(
                st.worker_s, st.engine_s, st.nccl_s if model.max_tp > 1 else 0.0, st.kv_init_s
            )
            self.act.launch(model, group, plan, LaunchParams("static"), now_ns)

    def route(self, req: Request, m: int, now_ns: int) -> None:
        inst = least_loaded(self.view.serving[m])
        if inst is None:
            self.act.retry_later(req, m, now_ns, self.cfg.retry_s)
        else:
            self.act.assign(req, inst, now_ns)
