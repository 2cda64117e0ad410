"""The cluster and disaggregation flag tables of ``tidal simulate`` (one row per flag; the
tables are joined in :data:`tidal.cli.flags.SIMULATE`, which re-exports them).

``--cluster``/``--models``/``--placement``/… make the run a multi-model cluster; any pool flag
(``--prefill-instances``, ``--decode-tp``, ``--kv-link``, …) a disaggregated prefill/decode
deployment. ``shows`` is the config's default, checked by tests/cli/test_flags.py.
"""

from __future__ import annotations

from tidal.cli.flagspec import Flag

S, I, F = str | None, int | None, float | None

PLACEMENT_NAMES = ("dedicated", "muxserve", "serverlessllm", "warmserve")
"""The registered placement policies (``PLACEMENTS``; a test keeps them equal): listed by name
so that ``tidal --help`` does not import the cluster's policies."""

CLUSTER = (
    Flag(
        "cluster", S, "Multi-model cluster NODESxGPUS:GPU, e.g. 2x8:h100.", "cluster.spec",
        shows="2x8:h100",
    ),
    Flag(
        "models", S, "Cluster: comma list of model ids (repeats allowed; id:tp; disaggregated "
        "id:PpDd or id:tp:PpDd, e.g. llama-2-7b:1p1d; per-pool TP id:TPp/TPd:PpDd, e.g. "
        "llama-2-7b:1/2:2p1d).",
        "cluster.models", shows="llama-2-7b,llama-2-7b,llama-2-13b,llama-2-70b",
    ),
    Flag(
        "placement", S, f"Cluster: {' | '.join(PLACEMENT_NAMES)}.",
        "cluster.placement", shows="warmserve",
    ),
    Flag("alpha", F, "Cluster: power-law skew of model shares.", "cluster.mix.alpha", shows=0.5),
    Flag(
        "warmserve_disable", list[str] | None,
        "Cluster: WarmServe features to turn off (repeatable or comma list): "
        "forecast, placement, kv-reservation, memory-switching, unified-memory, "
        "engine-prewarm, device-prewarm, all.",
        "cluster.warmserve.disable",
    ),
    Flag(
        "mix", S, "Cluster workload: azure (trace mapping) | servegen (14-day rates).",
        "cluster.mix.kind", shows="azure",
    ),
    Flag("days", F, "Cluster servegen mix: days to simulate.", "cluster.mix.days", shows=14.0),
    Flag(
        "unit_pools", S,
        "Cluster: a disaggregated unit's pools as one group (together), two groups when it is "
        "not one power-of-two group of a node (auto), or two groups on different nodes (apart).",
        "cluster.unit_pools", shows="auto",
    ),
    Flag(
        "node_link", S,
        "Cluster: link between nodes for a unit's KV: ib-ndr | ib-xdr | roce-400 | eth-100 | "
        "nvlink (multi-node NVLink) | pcie.",
        "cluster.network.link", shows="ib-ndr",
    ),
    Flag(
        "nics_per_node", I, "Cluster: NICs per node, shared by its GPUs (default: one per GPU).",
        "cluster.network.nics_per_node",
    ),
)  # fmt: skip

_DISAGG = "(any pool flag makes the run a disaggregated prefill/decode deployment)"
DISAGG = (
    Flag(
        "prefill_instances", I, f"Prefill pool: instances {_DISAGG}.",
        "deployment.prefill.instances", shows=1,
    ),
    Flag(
        "decode_instances", I, f"Decode pool: instances {_DISAGG}.",
        "deployment.decode.instances", shows=1,
    ),
    Flag("prefill_tp", I, "Prefill pool: tensor-parallel degree (default: --tp).",
         "deployment.prefill.tp"),
    Flag("decode_tp", I, "Decode pool: tensor-parallel degree (default: --tp).",
         "deployment.decode.tp"),
    Flag("prefill_gpu", S, "Prefill pool: GPU id (default: --gpu).", "deployment.prefill.gpu"),
    Flag("decode_gpu", S, "Decode pool: GPU id (default: --gpu).", "deployment.decode.gpu"),
    Flag(
        "kv_link", S,
        "Link the KV cache moves over from prefill to decode: auto (NVLink within a node, "
        "else ib-ndr) | nvlink | ib-ndr | ib-xdr | roce-400 | eth-100 | pcie.",
        "deployment.kv_transfer.link", shows="auto",
    ),
    Flag(
        "request_overhead_ms", S,
        "Disaggregated: the serving path's fixed per-request latency in ms (router hops, PD "
        "handshake, completion polling; its own TTFT term 'handoff'), a measured path (dynamo "
        "180, vllm-proxy 110) or auto (the decode engine's: sglang 180, vllm 110).",
        "deployment.request_overhead_ms", shows=0.0,
    ),
)  # fmt: skip
