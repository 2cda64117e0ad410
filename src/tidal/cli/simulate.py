"""``tidal simulate``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from tidal.cli import (
    Opt,
    TidalError,
    _deep_merge,
    _fail,
    _parse_rate,
    _run_and_write,
    _set,
    app,
    console,
    metrics_table,
    vllm_names,
)
from tidal.engine.policy import describe_batching


@app.command()
def simulate(
    out: Annotated[
        Path | None, Opt(help="Output directory (summary.json, requests.parquet).")
    ] = None,
    config: Annotated[Path | None, Opt(help="YAML config; flags override its values.")] = None,
    model: Annotated[str | None, Opt(help="Model id, e.g. llama-3.1-8b, qwen3-8b.")] = None,
    gpu: Annotated[
        str | None, Opt(help="GPU id: h100 h200 a100-80gb l40s rtx-pro-6000 b200.")
    ] = None,
    tp: Annotated[
        int | None,
        Opt("--tp", "--tensor-parallel-size", "-tp", help="Tensor-parallel degree. (default: 1)"),
    ] = None,
    perf_model: Annotated[
        str | None,
        Opt(
            help="auto (paper calibration > measured profile > corrected roofline) | roofline | "
            "corrected-roofline | measured | linear | profile:PATH (tidal calibrate) | "
            "measured:PATH (tidal-gpu-profile/1)."
        ),
    ] = None,
    trace: Annotated[
        str | None, Opt(help="Trace to replay (Azure CSV, Mooncake JSONL, ServeGen).")
    ] = None,
    max_requests: Annotated[int | None, Opt(help="Keep the first N requests of the trace.")] = None,
    rate_scale: Annotated[float | None, Opt(help="Multiply the trace's arrival rate.")] = None,
    start_s: Annotated[float | None, Opt(help="Trace window start (s from first arrival).")] = None,
    end_s: Annotated[float | None, Opt(help="Trace window end (s from first arrival).")] = None,
    num_requests: Annotated[
        int | None, Opt("--num-requests", "--num-prompts", help="Synthetic: number of requests.")
    ] = None,
    rate: Annotated[
        str | None,
        Opt(
            "--rate",
            "--request-rate",
            help="Synthetic: arrival rate in req/s, or inf; cluster: the mix total.",
        ),
    ] = None,
    arrival_cv: Annotated[
        float | None, Opt(help="Synthetic: inter-arrival CV (1 = Poisson). (default: 1)")
    ] = None,
    burstiness: Annotated[
        float | None,
        Opt(help="Synthetic: Gamma shape of the gaps (vLLM), i.e. --arrival-cv 1/sqrt(B)."),
    ] = None,
    prompt_len: Annotated[
        int | None,
        Opt(
            "--prompt-len",
            "--random-input-len",
            help="Synthetic: prompt length (location). (default: 512)",
        ),
    ] = None,
    output_len: Annotated[
        int | None,
        Opt(
            "--output-len",
            "--random-output-len",
            help="Synthetic: output length (location). (default: 256)",
        ),
    ] = None,
    length_dist: Annotated[
        str | None, Opt(help="fixed|uniform|geometric|lognormal|empirical:NAME.")
    ] = None,
    max_prompt_len: Annotated[int | None, Opt(help="Cap prompt lengths.")] = None,
    max_output_len: Annotated[int | None, Opt(help="Cap output lengths.")] = None,
    concurrency: Annotated[
        int | None,
        Opt("--concurrency", "--max-concurrency", help="Closed loop: requests kept in flight."),
    ] = None,
    workload: Annotated[
        str | None,
        Opt(
            help="Augmented workload: infercept-mix | infercept:TYPE[,TYPE] | augmented:FILE.jsonl."
        ),
    ] = None,
    call_time_dist: Annotated[
        str | None, Opt(help="Augmented: call times per type, or N|U|R|L|B (INFERCEPT).")
    ] = None,
    serving_policy: Annotated[
        str | None,
        Opt(help="Augmented: vllm | infercept | augserve (| augserve-ordering | augserve-budget)."),
    ] = None,
    predictor: Annotated[
        str | None, Opt(help="Augmented: oracle | noisy | mean | none (AugServe's predictions).")
    ] = None,
    swap_space_gb: Annotated[
        float | None, Opt(help="Augmented: host swap space per GPU for KV, GB.")
    ] = None,
    slo_norm_latency: Annotated[
        float | None,
        Opt(help="Augmented: normalized-latency SLO (s/token) of effective throughput."),
    ] = None,
    warmup: Annotated[
        int | None,
        Opt("--warmup", "--num-warmups", help="Warm-up requests sent first and not measured."),
    ] = None,
    batching: Annotated[str | None, Opt(help=f"Batching policy: {describe_batching()}.")] = None,
    ordering: Annotated[str | None, Opt(help="Waiting-queue ordering (fcfs, ...).")] = None,
    token_budget: Annotated[
        int | None,
        Opt(
            "--token-budget",
            "--max-num-batched-tokens",
            help="Max tokens per step (B; vLLM max_num_batched_tokens, also sizes the KV plan). "
            "(default: 8192)",
        ),
    ] = None,
    max_seqs: Annotated[
        int | None,
        Opt(
            "--max-seqs",
            "--max-num-seqs",
            help="Max running requests (N; vLLM max_num_seqs). (default: 256)",
        ),
    ] = None,
    gpu_memory_utilization: Annotated[
        float | None,
        Opt(
            help="vLLM gpu_memory_utilization: share of the driver-reported memory planned. "
            "(default: 0.9)"
        ),
    ] = None,
    slo_ttft: Annotated[float | None, Opt(help="TTFT SLO in seconds.")] = None,
    slo_tpot: Annotated[float | None, Opt(help="TPOT SLO in seconds.")] = None,
    seed: Annotated[int | None, Opt(help="Run seed.")] = None,
    no_fast_forward: Annotated[bool, Opt("--no-fast-forward", help="Simulate every step.")] = False,
    no_prefix_caching: Annotated[
        bool, Opt("--no-prefix-caching", help="Turn vLLM's prefix caching off.")
    ] = False,
    host_cache_gib: Annotated[
        float | None, Opt(help="Prefix cache: second tier in host memory per GPU, GiB (0: off).")
    ] = None,
    hash_block_tokens: Annotated[
        int | None, Opt(help="Mooncake: tokens per hash_ids entry (default 512).")
    ] = None,
    shared_prefix_groups: Annotated[
        int | None, Opt(help="Synthetic: G shared system prompts.")
    ] = None,
    shared_prefix_len: Annotated[
        int | None, Opt(help="Synthetic: tokens of each shared system prompt.")
    ] = None,
    n: Annotated[
        int | None, Opt("--n", help="Synthetic: parallel sampling, branches per prompt.")
    ] = None,
    branch_policy: Annotated[
        str | None, Opt(help="Parallel sampling: all (to completion) or parallel-probe.")
    ] = None,
    turns: Annotated[int | None, Opt(help="Synthetic: turns per multi-turn session.")] = None,
    handoff: Annotated[
        str | None, Opt(help="Sessions/agent chains: context handed on as kv or text.")
    ] = None,
    think_time: Annotated[
        float | None, Opt(help="Sessions: mean think time between turns (s).")
    ] = None,
    cluster: Annotated[
        str | None, Opt(help="Multi-model cluster NODESxGPUS:GPU, e.g. 2x8:h100.")
    ] = None,
    models: Annotated[
        str | None, Opt(help="Cluster: comma list of model ids (repeats allowed; id:tp).")
    ] = None,
    placement: Annotated[
        str | None, Opt(help="Cluster: dedicated | serverlessllm | muxserve | warmserve.")
    ] = None,
    alpha: Annotated[float | None, Opt(help="Cluster: power-law skew of model shares.")] = None,
    warmserve_disable: Annotated[
        list[str] | None,
        Opt(
            help="Cluster: WarmServe features to turn off (repeatable or comma list): "
            "forecast, placement, kv-reservation, memory-switching, unified-memory, "
            "engine-prewarm, device-prewarm, all."
        ),
    ] = None,
    mix: Annotated[
        str | None, Opt(help="Cluster workload: azure (trace mapping) | servegen (14-day rates).")
    ] = None,
    days: Annotated[float | None, Opt(help="Cluster servegen mix: days to simulate.")] = None,
    plot: Annotated[bool, Opt("--plot/--no-plot", help="Cluster: write gpu_timeline.png.")] = True,
    interference: Annotated[
        bool | None,
        Opt(
            "--interference/--no-interference",
            help="Charge mixed steps the EB paper's prefill/decode interference (default: only "
            "where measured, Qwen3-8B on H200 and RTX PRO 6000; on: bandwidth-derived elsewhere).",
        ),
    ] = None,
) -> None:
    """Simulate one serving instance, or a multi-model cluster (--cluster), on a trace or a
    synthetic workload."""
    from tidal.sim.config import load_config, load_yaml

    try:
        data: dict[str, Any] = load_yaml(config) if config else {}
        flags: dict[str, Any] = {}
        for key, val in (
            ("model", model),
            ("gpu", gpu),
            ("tp", tp),
            ("perf_model", perf_model),
            ("workload.trace", trace),
            ("workload.max_requests", max_requests),
            ("workload.rate_scale", rate_scale),
            ("workload.start_s", start_s),
            ("workload.end_s", end_s),
            ("workload.num_requests", num_requests),
            ("workload.rate", _parse_rate(rate)),
            ("workload.arrival_cv", vllm_names.arrival_cv(arrival_cv, burstiness)),
            ("workload.prompt_len", prompt_len),
            ("workload.output_len", output_len),
            ("workload.length_dist", length_dist),
            ("workload.max_prompt_len", max_prompt_len),
            ("workload.max_output_len", max_output_len),
            ("workload.concurrency", concurrency),
            ("workload.augmented", workload),
            ("workload.call_time_dist", call_time_dist),
            ("augment.serving_policy", serving_policy),
            ("augment.predictor", predictor),
            ("augment.swap_space_gb", swap_space_gb),
            ("slo.norm_latency_s", slo_norm_latency),
            ("workload.warmup_requests", warmup),
            ("scheduler.batching", batching),
            ("scheduler.ordering", ordering),
            ("scheduler.token_budget", token_budget),
            ("scheduler.max_seqs", max_seqs),
            ("memory.gpu_memory_utilization", gpu_memory_utilization),
            ("slo.ttft_s", slo_ttft),
            ("slo.tpot_s", slo_tpot),
            ("seed", seed),
            ("workload.hash_block_tokens", hash_block_tokens),
            ("memory.host_cache_gib", host_cache_gib),
            ("workload.shared_prefix_groups", shared_prefix_groups),
            ("workload.shared_prefix_len", shared_prefix_len),
            ("workload.turns", turns),
            ("workload.n", n),
            ("workload.branch_policy", branch_policy),
            ("workload.handoff", handoff),
            ("workload.think_time_s", think_time),
        ):
            _set(flags, key, val)
        if no_fast_forward:
            flags["fast_forward"] = False
        if no_prefix_caching:
            _set(flags, "memory.prefix_caching", False)
        in_cluster = cluster is not None or models is not None or placement is not None
        if in_cluster or "cluster" in data:
            _set(flags, "cluster.spec", cluster)
            _set(flags, "cluster.models", models)
            _set(flags, "cluster.placement", placement)
            _set(flags, "cluster.mix.alpha", alpha)
            _set(flags, "cluster.mix.kind", mix)
            _set(flags, "cluster.mix.days", days)
            _set(flags, "cluster.warmserve.disable", warmserve_disable)
            rate_value = flags.get("workload", {}).pop("rate", None)
            _set(flags, "cluster.mix.rate", rate_value)
            # augmented requests on the mix's arrivals (each engine: augment.* over batching)
            _set(flags, "cluster.mix.augmented", flags.get("workload", {}).pop("augmented", None))
            flags.setdefault("cluster", {})
            if mix == "servegen" and trace is None and not data.get("workload", {}).get("trace"):
                _set(flags, "workload.trace", "servegen/servegen_aggregate_rate_10min.csv.gz")
        if interference is not None:
            flags["interference"] = interference
        data = _deep_merge(data, flags)
        data.setdefault("workload", {})
        cfg = load_config(data)
        result = _run_and_write(cfg, out)
        if out is not None and "ebplus" in result.extras.get("tables", {}):
            from tidal.report.ebplus_plot import plot_ebplus

            plot_ebplus(
                result.extras["tables"]["ebplus"],
                Path(out) / "ebplus_mode.png",
                f"EB⁺: {cfg.model} on {cfg.gpu}",
                cfg.scheduler.eb.sticky,
            )
    except TidalError as err:
        _fail(err)
        return
    if cfg.cluster is not None:
        _print_cluster(cfg, result, out, plot)
        return
    title = f"{cfg.model} on {cfg.tp}× {cfg.gpu}, {cfg.scheduler.batching}"
    if cfg.workload.augmented is not None:
        title = f"{cfg.model} on {cfg.tp}× {cfg.gpu}, {cfg.augment.serving_policy}"
    if cfg.perf_model.startswith("profile:"):
        title = f"{cfg.model}, measured {cfg.perf_model}, {cfg.scheduler.batching}"
    console.print(metrics_table(title, {"this run": result.metrics}))
    info = result.run_info
    console.print(
        f"simulated {result.metrics['num_requests']:,} requests in {info['simulate_s']:.2f} s "
        f"({info['simulated_requests_per_s']:,.0f} req/s, {info['num_events']:,} events)"
        + (f"; results in {out}" if out else "")
    )


def _print_cluster(cfg: Any, result: Any, out: Path | None, plot: bool) -> None:
    c = cfg.cluster
    per_model = result.extras["summary"]["per_model"]
    rows = {"all": result.metrics, **per_model}
    title = f"{c.placement} on {c.spec}: {', '.join(per_model)}"
    console.print(metrics_table(title, rows))
    m = result.metrics
    hit = m.get("prewarm_hit_rate")
    console.print(
        f"instance starts {m['instance_starts']}, cold starts {m['cold_starts']}, prewarm hit "
        f"rate {'—' if hit is None else f'{hit:.1%}'}, GPU-seconds {m['gpu_seconds']:,.0f}"
    )
    if out is not None and plot:
        from tidal.report.cluster_plot import plot_gpu_timeline

        plot_gpu_timeline(result, out / "gpu_timeline.png")
    info = result.run_info
    console.print(
        f"simulated {m['num_requests']:,} requests in {info['simulate_s']:.2f} s "
        f"({info['num_events']:,} events)" + (f"; results in {out}" if out else "")
    )
