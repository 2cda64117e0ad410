"""Per-row signed errors of the two vLLM MoE decode groups that issue 28 left worst (docs/design/
moe_vllm_deepgemm.md): Qwen3-235B-A22B-FP8 (vLLM 0.12, H200) and MiniMax-M2.5 on Hopper, from a
replay's result file, one line per distinct measurement (TP, EP, ISL/OSL, C, version).

    python bench/moe_groups.py [--tag s30]

Signed error = sim / silicon − 1 (negative: the simulator is too fast). The silicon − sim gap is
printed per step (ms) and per layer (µs), the form a per-layer kernel cost would take.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import polars as pl

RESULTS = Path(__file__).resolve().parent / "results" / "silicon"
GROUPS = {
    "Qwen3-235B-A22B-FP8, vLLM": ("Qwen3-235B", 94, None),
    "MiniMax-M2.5, vLLM, Hopper": ("MiniMax", 62, "h"),
}
"""Group name → (model substring, decoder layers, GPU prefix or None)."""


def group_rows(df: pl.DataFrame, model: str, layers: int, gpu: str | None) -> pl.DataFrame:
    """The group's replayed rows with signed errors and the per-step / per-layer TPOT gap."""
    ok = (pl.col("engine") == "vllm") & (pl.col("status") == "ok")
    q = df.filter(pl.col("model").str.contains(model) & ok)
    if gpu is not None:
        q = q.filter(pl.col("gpu").str.starts_with(gpu))
    gap = pl.col("silicon_tpot_ms") - pl.col("sim_tpot_ms")
    return (
        q.with_columns(
            (100 * pl.col("tpot_err")).round(1).alias("tpot_%"),
            (100 * pl.col("ttft_err")).round(1).alias("ttft_%"),
            gap.round(2).alias("gap_ms"),
            (1000 * gap / layers).round(0).alias("gap_us_layer"),
        )
        .select("version", "gpu", "tp", "moe_ep", "isl", "osl", "concurrency", "silicon_tpot_ms",
                "sim_tpot_ms", "tpot_%", "ttft_%", "gap_ms", "gap_us_layer")
        .unique()
        .sort("version", "gpu", "tp", "moe_ep", "concurrency", "isl", "osl")
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tag", default="s30")
    a = ap.parse_args()
    df = pl.read_csv(RESULTS / f"{a.tag}.csv.gz", infer_schema_length=100_000)
    pl.Config.set_tbl_rows(500)
    pl.Config.set_tbl_cols(20)
    pl.Config.set_tbl_width_chars(250)
    for name, (model, layers, gpu) in GROUPS.items():
        rows = group_rows(df, model, layers, gpu)
        print(f"\n## {name} ({a.tag}): {rows.height} distinct rows, median signed TPOT "
              f"{rows['tpot_%'].median()} %, TTFT {rows['ttft_%'].median()} %")  # fmt: skip
        by = ["version", "gpu", "tp", "moe_ep"]
        print(rows.group_by(by).agg(pl.len().alias("n"), pl.col("tpot_%").median(),
                                    pl.col("ttft_%").median(), pl.col("gap_ms").median(),
                                    pl.col("gap_us_layer").median()).sort(by))  # fmt: skip
        print(rows)


if __name__ == "__main__":
    main()
