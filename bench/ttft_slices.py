"""Where a silicon replay's TTFT gap comes from: per deployment, the measured and simulated
TTFT at the lowest concurrency split into an intercept and a per-prompt-token slope (issue 28).

    python bench/ttft_slices.py bench/results/silicon/s30_mla.csv.gz [--engine sglang] [-c 4]

For each (engine, model, GPU, precision, version, TP, attention DP, EP) group that has rows at
ISL 1,024 and 8,192 at concurrency ``C``: TTFT(ISL) ≈ intercept + slope · ISL, measured and
simulated (``sim_ttft_engine_ms``: engine-side, without the vLLM rows' API-server constant). A
gap in the intercept with matching slopes is a per-request (or per-step) constant; a gap in
the slope is prefill priced wrong per token. Then the signed median TTFT error by concurrency.
Duplicated measurements (the sample holds some runs under several source names) count once.
"""

from __future__ import annotations

import argparse

import polars as pl

KEY = ["engine", "model", "gpu", "precision", "version", "tp", "attention_dp", "moe_ep"]
SAME = [*KEY, "isl", "osl", "concurrency"]


def load(path: str, engine: str | None) -> pl.DataFrame:
    d = pl.read_csv(path).filter(pl.col("status") == "ok").unique(subset=SAME)
    if engine:
        d = d.filter(pl.col("engine") == engine)
    return d.with_columns(pl.col("version").fill_null(""))


def intercepts(d: pl.DataFrame, c: int) -> pl.DataFrame:
    """Intercept (ms) and slope (µs per prompt token) of TTFT over ISL 1,024 → 8,192."""
    a = d.filter(pl.col("concurrency") == c).group_by([*KEY, "isl"]).agg(
        pl.col("silicon_ttft_ms").mean().alias("m"), pl.col("sim_ttft_engine_ms").mean().alias("s")
    )
    w = a.filter(pl.col("isl") == 1024).join(a.filter(pl.col("isl") == 8192), on=KEY, suffix="8k")
    out = []
    for side in ("m", "s"):
        slope = (pl.col(f"{side}8k") - pl.col(side)) / 7.168
        out += [slope.round(1).alias(f"slope_{side}_us"),
                (pl.col(side) - slope * 1.024).round(0).alias(f"icpt_{side}_ms")]  # fmt: skip
    return w.with_columns(out).select([*KEY, "icpt_m_ms", "icpt_s_ms", "slope_m_us", "slope_s_us"])


def by_concurrency(d: pl.DataFrame) -> pl.DataFrame:
    return (
        d.group_by(["engine", "concurrency"])
        .agg(pl.len().alias("rows"), pl.col("ttft_err").median().round(3).alias("ttft_signed"),
             (pl.col("silicon_ttft_ms") - pl.col("sim_ttft_ms")).median().round(0).alias("gap_ms"),
             pl.col("off_2x").sum().alias("off_2x"))
        .sort(["engine", "concurrency"])
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results")
    p.add_argument("--engine", default=None)
    p.add_argument("-c", "--concurrency", type=int, default=4)
    a = p.parse_args(argv)
    pl.Config.set_tbl_rows(200)
    pl.Config.set_tbl_cols(20)
    pl.Config.set_tbl_width_chars(240)
    d = load(a.results, a.engine)
    print(intercepts(d, a.concurrency).sort(KEY))
    print(by_concurrency(d))


if __name__ == "__main__":
    main()
