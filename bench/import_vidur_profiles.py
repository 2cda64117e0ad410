"""Regenerate ``src/tidal/data/profiles/vidur-*.json.gz`` from a git mirror of microsoft/vidur.

Reads the public profiling CSVs (MIT licence) with ``git show``, keeps the medians of the columns
the step model needs and writes one ``tidal-gpu-profile/1`` file per GPU
(``docs/PROFILE_FORMAT.md``). Data only: no Vidur code is used.

    python bench/import_vidur_profiles.py --mirror PATH   # a git clone of microsoft/vidur

Sources (commit: path):
* HEAD: ``data/profiling/compute/{a100,h100,a40}/<org>/<model>/mlp.csv`` (linear and elementwise
  ops against num_tokens, per TP) and ``data/profiling/network/*/all_reduce.csv``;
* acb95f6: ``data/profiling/a100/attention.csv`` (the only attention table below 4 MiB) and
  ``data/profiling/a40/all_reduce.csv``;
* 57720ca: ``data/profiling/{a100,a40}/cpu_overheads.csv`` (host times per batch size).
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from tidal.hardware.opprofile import (
    BUNDLED_DIR,
    LAYER_OPS,
    AllReduceOps,
    AttentionOps,
    GPUProfile,
    Grid2D,
    HostOps,
    LinearOps,
    ModelShape,
    Provenance,
    save_profile,
)

REPO = "microsoft/vidur"
MODELS = {
    "meta-llama/Llama-2-7b-hf": "llama-2-7b",
    "meta-llama/Llama-2-70b-hf": "llama-2-70b",
    "codellama/CodeLlama-34b-Instruct-hf": "codellama-34b",
    "Qwen/Qwen-72B": "qwen-72b",
    "internlm/internlm-20b": "internlm-20b",
    "microsoft/phi-2": "phi-2",
    "meta-llama/Meta-Llama-3-8B": "llama-3-8b",
    "meta-llama/Meta-Llama-3-70B": "llama-3-70b",
}
GPUS = {"a100": "a100-80gb", "h100": "h100", "a40": "a40"}
NET = "data/profiling/network"
NETWORK = {  # gpu -> [(link kind, path, commit or None for HEAD)]
    "a100": [("dgx", f"{NET}/a100_dgx/all_reduce.csv", None),
             ("pairwise_nvlink", f"{NET}/a100_pairwise_nvlink/all_reduce.csv", None)],
    "h100": [("dgx", f"{NET}/h100_dgx/all_reduce.csv", None),
             ("pairwise_nvlink", f"{NET}/h100_pairwise_nvlink/all_reduce.csv", None)],
    "a40": [("pairwise_nvlink", "data/profiling/a40/all_reduce.csv", "acb95f6")],
}  # fmt: skip
ATTENTION = {"a100": ("acb95f6", "data/profiling/a100/attention.csv")}
HOST = {g: ("57720ca", f"data/profiling/{g}/cpu_overheads.csv") for g in ("a100", "a40")}
HOST_COLS = {
    "schedule": "schedule_median",
    "sampler": "sampler_e2e_median",
    "prepare_inputs": "prepare_inputs_e2e_median",
    "process_outputs": "process_model_outputs_median",
    "model_execution": "model_execution_e2e_median",
}


class Mirror:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.head = self._git("rev-parse", "HEAD").strip()

    def _git(self, *args: str) -> str:
        out = subprocess.run(["git", "-C", str(self.path), *args], capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(f"git {' '.join(args)}: {out.stderr.strip()}")
        return out.stdout

    def commit(self, short: str | None) -> str:
        return self.head if short is None else self._git("rev-parse", short).strip()

    def csv(self, path: str, commit: str | None = None) -> tuple[pd.DataFrame, Provenance]:
        c = self.commit(commit)
        df = pd.read_csv(io.StringIO(self._git("show", f"{c}:{path}")))
        return df, Provenance(repo=REPO, commit=c, path=path)

    def files(self) -> list[str]:
        return self._git("ls-tree", "-r", "--name-only", "HEAD").split()


def _r(x: np.ndarray) -> list[float]:
    """ms → µs, rounded to 0.1 µs (the data's resolution is 1 µs)."""
    return [round(float(v) * 1000.0, 1) for v in x]


def linear_ops(df: pd.DataFrame, prov: Provenance, model: str) -> list[LinearOps]:
    row = df.iloc[0]
    shape = ModelShape(
        hidden=int(row.n_embd),
        q_heads=int(row.n_head),
        kv_heads=int(row.n_kv_head),
        intermediate=int(row.n_expanded_embd),
        vocab=int(row.vocab_size),
        gated_mlp=bool(row.use_gated_mlp),
    )
    out = []
    for tp, g in df.groupby("num_tensor_parallel_workers"):
        med = g.groupby("num_tokens").median(numeric_only=True).sort_index()
        layer = {
            op: _r(med[f"time_stats.{op}.median"].to_numpy())
            for op in LAYER_OPS
            if f"time_stats.{op}.median" in med.columns  # phi-2 has one layer norm
        }
        step = {"emb": _r(med["time_stats.emb.median"].to_numpy())}
        tokens = [int(t) for t in med.index]
        out.append(LinearOps(model=model, tp=int(tp), shape=shape, tokens=tokens,
                             layer_us=layer, step_us=step, provenance=prov))  # fmt: skip
    return out


def _grid(df: pd.DataFrame, row: str, col: str, value: str) -> Grid2D:
    med = df.groupby([row, col])[value].median().unstack(col).sort_index().sort_index(axis=1)
    us = [[None if np.isnan(v) else round(float(v) * 1000.0, 1) for v in r] for r in med.values]
    return Grid2D(rows=[int(x) for x in med.index], cols=[int(x) for x in med.columns], us=us)


def attention_ops(df: pd.DataFrame, prov: Provenance) -> AttentionOps:
    row = df.iloc[0]
    tp = int(row.num_tensor_parallel_workers)
    dec = df[~df.is_prefill.astype(bool)]
    pre = df[df.is_prefill.astype(bool)]
    return AttentionOps(
        q_heads=int(row.n_q_head) // tp,
        kv_heads=max(int(row.n_kv_head) // tp, 1),
        head_dim=int(row.n_embd) // int(row.n_q_head),
        block_size=int(row.block_size),
        decode=_grid(dec, "batch_size", "kv_cache_size", "time_stats.attn_decode.median"),
        prefill=_grid(pre, "prefill_chunk_size", "kv_cache_size", "time_stats.attn_prefill.median"),
        provenance=prov,
    )


def all_reduce_ops(df: pd.DataFrame, prov: Provenance, link: str) -> list[AllReduceOps]:
    df = df[(df.collective == "all_reduce") & (df.devices_per_node == df.num_workers)]
    out = []
    for tp, g in df.groupby("num_workers"):
        med = g.groupby("size")["time_stats.all_reduce.median"].median().sort_index()
        out.append(AllReduceOps(link=link, tp=int(tp), bytes=[int(b) for b in med.index],  # type: ignore[arg-type]
                                us=_r(med.to_numpy()), provenance=prov))  # fmt: skip
    return out


def host_ops(df: pd.DataFrame, prov: Provenance) -> list[HostOps]:
    out = []
    for (name, tp), g in df.groupby(["model_name", "tensor_parallel_degree"]):
        if name not in MODELS:
            continue
        g = g.groupby("batch_size").median(numeric_only=True).sort_index()
        ms = {k: [round(float(v), 4) for v in g[c]] for k, c in HOST_COLS.items()}
        out.append(HostOps(model=MODELS[str(name)], tp=int(tp),
                           batch=[int(b) for b in g.index], ms=ms, provenance=prov))  # fmt: skip
    return out


def build(mirror: Mirror, gpu: str) -> GPUProfile:
    linear: list[LinearOps] = []
    for f in mirror.files():
        parts = f.split("/")
        if f.endswith("/mlp.csv") and parts[2:4] == ["compute", gpu]:
            name = f"{parts[4]}/{parts[5]}"
            df, prov = mirror.csv(f)
            linear += linear_ops(df, prov, MODELS[name])
    attention = []
    if gpu in ATTENTION:
        c, path = ATTENTION[gpu]
        attention.append(attention_ops(*mirror.csv(path, c)))
    ar: list[AllReduceOps] = []
    for link, path, c in NETWORK.get(gpu, []):
        df, prov = mirror.csv(path, c)
        ar += all_reduce_ops(df, prov, link)
    host = host_ops(*mirror.csv(HOST[gpu][1], HOST[gpu][0])) if gpu in HOST else []
    return GPUProfile(
        gpu=GPUS[gpu],
        source="vidur",
        notes=f"Imported from {REPO} (MIT) data/profiling; medians only. GPU kernel times from "
        "CUDA timers (no LM head, sampling or host time in linear/attention).",
        linear=sorted(linear, key=lambda x: (x.model, x.tp)),
        attention=attention,
        all_reduce=ar,
        host=host,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mirror", type=Path, required=True, help="a git clone of microsoft/vidur")
    ap.add_argument("--out", type=Path, default=BUNDLED_DIR)
    args = ap.parse_args()
    mirror = Mirror(args.mirror)
    for gpu in GPUS:
        prof = build(mirror, gpu)
        path = args.out / f"vidur-{prof.gpu}.json.gz"
        save_profile(prof, path)
        print(f"{path}: {len(prof.linear)} linear, {len(prof.attention)} attention, "
              f"{len(prof.all_reduce)} all-reduce, {len(prof.host)} host; "
              f"{path.stat().st_size / 1024:.0f} KiB")  # fmt: skip


if __name__ == "__main__":
    main()
