"""WarmServe's past-capacity triage (``docs/design/warmserve-high-rate.md#past-capacity-triage``,
the measurements behind it): when a
model is starved and no other model holds more than its need, the cluster is past its capacity
and some model's backlog will grow whatever the policy does. Triage chooses which: the model
that serves the fewest requests per GPU gives one instance to the starved one.

*Service density* of model j (requests completed per GPU-second), an exponentially weighted
average with time constant τ = ``triage_window_s``:

    d_j(t) = C_j(t) / G_j(t),   C_j = Σ_finishes e^{-(t - t_f)/τ},
                                G_j = ∫ gpus_j(s) e^{-(t - s)/τ} ds,

where gpus_j is the GPUs of j's serving instances (taken as constant between updates, which
come at each of j's finishes and at every guard period with a starved model). With the
guard's condition 3 failing every model runs at or above its need, so d_j is its saturated
per-GPU rate, the cost of serving it: on the grid a 70B on TP 4 completes 5–10× fewer
requests per GPU than the 7–13B models.

Rule (one instance per starved model per control period, through the guard's node choice),
for a starved model m whose oldest request has waited ``triage_wait_s`` (10 s; the guard's
ordinary hand-backs start at 2 s and, within capacity, mend a wait before it gets there):
the donor j has the lowest d_j among the models not starved themselves with at least two
serving instances (it keeps one, so its backlog keeps draining), and d_m ≥ ``triage_ratio``
· d_j for the starved model m (ratio 2: a trade of one of j's GPUs for one of m's serves at
least twice the requests). Moving GPUs to the denser model maximizes the requests served
within the SLO; the donor's backlog grows, as it would in some model under any policy.
"""

from __future__ import annotations

import math

from tidal.cluster.view import ClusterView


class ServiceDensity:
    def __init__(self, view: ClusterView, window_s: float) -> None:
        self.view = view
        self.tau_ns = window_s * 1e9
        nm = len(view.models)
        self.done = [0.0] * nm
        self.gpu_ns = [0.0] * nm
        self.t_ns = [0] * nm
        """Per model, the time its two sums are decayed to."""

    def advance(self, now_ns: int, m: int | None = None) -> None:
        """Decay model m's sums (every model's when None) to ``now_ns``, integrating its
        current GPUs since its last update: ∫_0^Δ g e^{-(Δ - s)/τ} ds = g·τ·(1 - e^{-Δ/τ})."""
        for j in range(len(self.done)) if m is None else (m,):
            dt = now_ns - self.t_ns[j]
            if dt <= 0:
                continue
            f = math.exp(-dt / self.tau_ns)
            gpus = sum(len(i.gpus) for i in self.view.serving[j])
            self.done[j] *= f
            self.gpu_ns[j] = self.gpu_ns[j] * f + gpus * self.tau_ns * (1.0 - f)
            self.t_ns[j] = now_ns

    def finished(self, m: int, now_ns: int) -> None:
        self.advance(now_ns, m)
        self.done[m] += 1.0

    def density(self, m: int) -> float:
        """Requests per GPU-second (0 before model m has held a GPU)."""
        g = self.gpu_ns[m]
        return self.done[m] / g * 1e9 if g > 0 else 0.0

    def donor(self, m: int, skip: set[int], ratio: float) -> int | None:
        """The model to give starved model m one instance (module docstring), or None."""
        dm = self.density(m)
        cands = [
            j
            for j, insts in enumerate(self.view.serving)
            if j != m and j not in skip and len(insts) >= 2 and self.gpu_ns[j] > 0
        ]
        if not cands or dm <= 0:
            return None
        j = min(cands, key=lambda j: (self.density(j), j))
        return j if dm >= ratio * self.density(j) else None
