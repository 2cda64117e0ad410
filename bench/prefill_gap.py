"""Missing prefill work of a silicon replay: measured − simulated single-prompt prefill × TP.

For the vLLM rows of one model at one concurrency (default 4: a prompt seldom waits for
another's prefill), the prefill of one prompt is TTFT − the API server's request path
(``api_server.OVERHEADS``) − one TPOT, both for the measurement and for the replay
(``bench/silicon.py`` results). The difference times the tensor-parallel size is the work
the step model lacks in GPU-milliseconds: constant across TP for work the GPUs split,
growing with TP for work each GPU repeats.

    python bench/prefill_gap.py bench/results/silicon/e7.csv.gz --model gpt-oss
"""

from __future__ import annotations

import argparse

import polars as pl

from tidal.hardware.api_server import OVERHEADS

API_SERVER_MS = 1e3 * OVERHEADS["vllm"].request_s
"""vLLM's request path, as in ``tidal.hardware.api_server`` (client-side TTFT)."""


def gap_table(path: str, model: str, concurrency: int) -> pl.DataFrame:
    """Median per (GPU, ISL, TP) of the measured and simulated prefill and ms·GPU missing."""
    df = pl.read_csv(path, infer_schema_length=100_000).filter(
        pl.col("model").str.contains(model) & (pl.col("concurrency") == concurrency)
        & (pl.col("status") == "ok") & (pl.col("engine") == "vllm")
    )  # fmt: skip
    pre = [
        (pl.col(f"{k}_ttft_ms") - API_SERVER_MS - pl.col(f"{k}_tpot_ms")).alias(k)
        for k in ("silicon", "sim")
    ]
    g = df.with_columns(*pre).group_by("gpu", "isl", "tp").agg(
        pl.len().alias("rows"), pl.col("silicon").median(), pl.col("sim").median()
    )
    return g.with_columns(
        (pl.col("silicon") / pl.col("sim")).round(2).alias("ratio"),
        ((pl.col("silicon") - pl.col("sim")) * pl.col("tp")).round(0).alias("ms_gpu"),
    ).sort("gpu", "isl", "tp")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="a bench/silicon.py results .csv.gz")
    ap.add_argument("--model", default="gpt-oss", help="regex on the model column")
    ap.add_argument("--concurrency", type=int, default=4)
    a = ap.parse_args(argv)
    pl.Config.set_tbl_rows(200)
    pl.Config.set_tbl_width_chars(200)
    print(gap_table(a.results, a.model, a.concurrency))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
