"""Fit the corrected roofline's constants (``tidal.hardware.corrected``) on measured profiles.

Every fit minimises squared *relative* error (log residuals for the non-linear GEMM model,
rows weighted by 1/t for the linear ones), so short and long kernels count alike. Groups are
fitted separately, each on its own data:

* GEMMs: global (M_½, t0, p) and per-GPU (η_F, η_B), ``scipy.optimize.least_squares``;
* elementwise ops: per op (t0, k), pooled over GPUs through BW;
* all-reduce: per (GPU, link) (a, b, η), and again on the sweeps capped by rule R1
  (:func:`tp_capped`) for GPUs that borrow them;
* attention: decode (t0, t1, η_A) and prefill (t0, η_P) on the A100 table;
* host: (h0, h1) on the A100 host times minus the modelled LM head (``vidur``), and vLLM
  v1's on the EB paper's step constants of other models than Qwen3-8B (``bench/host_fit.py``).

``profiles`` selects what a fit may see (hold-out splits in ``bench/step_accuracy.py``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from tidal.hardware.corrected import (
    ELEMENTWISE,
    AttentionConst,
    GemmConst,
    GPUConst,
    HostConst,
    LinkConst,
    RooflineConstants,
    allreduce_time,
    elementwise_bytes,
    gemm_time,
    layer_gemms,
    ridge_tokens,
)
from tidal.hardware.gpus import get_gpu
from tidal.hardware.interp import binned_median, fill_row
from tidal.hardware.models import get_model
from tidal.hardware.opprofile import GPUProfile, LinearOps

FAMILY = {"h200": "h100", "b200": "h100", "l40s": "a40", "rtx-pro-6000": "a40"}
"""GPUs without profiles borrow the constants of the same generation and memory type."""


@dataclass
class Lin:
    gpu: str
    ops: LinearOps


def linears(profiles: Iterable[GPUProfile], exclude_model: str | None = None) -> list[Lin]:
    return [
        Lin(p.gpu, x) for p in profiles for x in p.linear if x.model != exclude_model
    ]  # fmt: skip


def _wlstsq(a: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Least squares of relative error: rows scaled by 1/t."""
    w = 1.0 / np.maximum(t, 1e-12)
    coef, *_ = np.linalg.lstsq(a * w[:, None], t * w, rcond=None)
    return coef


def fit_gemm(
    lins: Sequence[Lin], m_tile: int = 0, p_by: str = ""
) -> tuple[GemmConst, dict[str, GPUConst]]:
    """``p_by`` (``k``, ``nk``; empty: off) also fits the corner exponent's growth ``p_k``."""
    gpus = sorted({x.gpu for x in lins})
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("g", "m", "k", "n", "dt", "t", "w")}
    for x in lins:
        model = get_model(x.ops.model)
        m = np.asarray(x.ops.tokens, dtype=float)
        for op, k, n in layer_gemms(model, x.ops.tp):
            t = np.asarray(x.ops.layer_us[op]) * 1e-6
            ok = t > 0
            cols["g"].append(np.full(ok.sum(), gpus.index(x.gpu)))
            cols["m"].append(m[ok])
            cols["k"].append(np.full(ok.sum(), float(k)))
            cols["n"].append(np.full(ok.sum(), float(n)))
            cols["dt"].append(np.full(ok.sum(), float(model.dtype_bytes)))
            cols["t"].append(t[ok])
            cols["w"].append(np.full(ok.sum(), 1.0 / ok.sum()))
    d = {k: np.concatenate(v) for k, v in cols.items()}
    f = np.array([get_gpu(g).flops for g in gpus])[d["g"].astype(int)]
    bw = np.array([get_gpu(g).mem_bw for g in gpus])[d["g"].astype(int)]
    ridge = np.array([ridge_tokens(get_gpu(g), 2) for g in gpus])[d["g"].astype(int)]
    gi = d["g"].astype(int)
    sw = np.sqrt(d["w"] / d["w"].mean())
    ng = len(gpus)

    ex = 1 if p_by else 0

    def resid(p: np.ndarray) -> np.ndarray:
        ef, eb = p[3 : 3 + ng][gi], p[3 + ng : 3 + 2 * ng][gi]
        mh = p[0] * ridge
        pk = float(p[-1]) if ex else 0.0
        pred = gemm_time(d["m"], d["k"], d["n"], d["dt"], f, bw, ef, eb, mh, p[1], p[2], m_tile,
                         pk, p_by or "k")  # fmt: skip
        return sw * np.log(pred / d["t"])

    x0 = np.array([0.3, 3.0, 3.0, *([0.75] * ng), *([0.8] * ng), *([0.0] * ex)])
    lo = [0.001, 0.0, 1.0, *([0.05] * ng), *([0.05] * ng), *([-4.0] * ex)]
    hi = [20.0, 50.0, 12.0, *([1.0] * ng), *([1.0] * ng), *([4.0] * ex)]
    r = least_squares(resid, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.1)
    p = r.x
    gemm = GemmConst(m_half_ridge=float(p[0]), t0_us=float(p[1]), p=float(p[2]), m_tile=m_tile,
                     p_k=float(p[-1]) if ex else 0.0, p_by=p_by or "k")  # fmt: skip
    per = {g: GPUConst(eta_flops=float(p[3 + i]), eta_bw=float(p[3 + ng + i])) for i, g in
           enumerate(gpus)}  # fmt: skip
    return gemm, per


def fit_elementwise(lins: Sequence[Lin]) -> dict[str, tuple[float, float, float]]:
    out: dict[str, tuple[float, float, float]] = {}
    for op in (*ELEMENTWISE, "emb"):
        rows, ts = [], []
        for x in lins:
            src = x.ops.step_us if op == "emb" else x.ops.layer_us
            if op not in src:
                continue
            b = elementwise_bytes(get_model(x.ops.model), x.ops.tp)[op]
            m = np.asarray(x.ops.tokens, dtype=float)
            bw = get_gpu(x.gpu).mem_bw
            t = np.asarray(src[op]) * 1e-6
            ok = t > 0
            n = int(ok.sum())
            rows.append(np.column_stack([np.full(n, 1e-6), np.full(n, b * 1e-9), m[ok] * b / bw]))
            ts.append(t[ok])
        if rows:
            c = _wlstsq(np.vstack(rows), np.concatenate(ts))
            out[op] = (max(float(c[0]), 0.0), max(float(c[2]), 0.0), max(float(c[1]), 0.0))
    return out


def _fit_pnorm(ars: Sequence[Any], bw: float, skip: int = 0) -> tuple[LinkConst, float]:
    """(a, b, η, p) of ``allreduce_time`` on the binned sweeps past their first ``skip`` knots
    (log residuals); b only with two or more group sizes. Returns the constants and the sum
    of squared residuals."""
    pts = []
    for a in ars:
        x, y = binned_median(a.bytes, a.us)
        pts += [(a.tp, xb, t * 1e-6) for xb, t in list(zip(x, y, strict=True))[skip:]]
    tp, xb, t = (np.array(v, dtype=float) for v in zip(*pts, strict=True))
    multi = len(ars) > 1

    def model(q: np.ndarray) -> np.ndarray:
        lc = LinkConst(lat_us=q[0], lat_log2_us=q[3] if multi else 0.0, eta=q[1], p=q[2])
        if not multi:
            return np.asarray(allreduce_time(xb, ars[0].tp, bw, lc))
        return np.array([allreduce_time(b, int(n), bw, lc) for n, b in zip(tp, xb, strict=True)])

    x0 = [float(np.min(t)) * 1e6, 0.7, 2.0] + ([0.0] if multi else [])
    lo = [0.0, 0.01, 1.0] + ([-50.0] if multi else [])
    hi = [1e4, 1.5, 16.0] + ([200.0] if multi else [])
    r = least_squares(lambda q: np.log(model(q) / t), x0, bounds=(lo, hi))
    q = r.x
    lc = LinkConst(lat_us=float(q[0]), lat_log2_us=float(q[3]) if multi else 0.0,
                   eta=float(q[1]), p=float(q[2]))  # fmt: skip
    return lc, float(np.sum(r.fun**2))


def _linear_regime(x: np.ndarray, y: np.ndarray, ring: float, bw: float) -> tuple[float, float]:
    """(µs, η) of ``us + R·bytes/(η·bw)`` on a regime's knots (relative least squares; a
    median constant, η = 0, with under three knots or a fit that is not positive)."""
    if len(x) >= 3:
        a0, slope = (float(v) for v in _wlstsq(np.column_stack([np.ones(len(x)), x]), y))
        if a0 > 0 and slope > 0:
            return a0 * 1e6, ring / (slope * bw)
    return float(np.median(y)) * 1e6, 0.0


def _partitions(k: int, parts: int) -> Iterable[tuple[int, ...]]:
    """Cut points 0 < c1 < … < k splitting knots [0, k) into 1 … ``parts`` contiguous runs
    (none when k = 0); each tuple ends with k."""
    if k == 0:
        yield ()
        return
    for n in range(1, parts + 1):
        for cuts in itertools.combinations(range(1, k), n - 1):
            yield (*cuts, k)


def _fit_link(ars: Sequence[Any], bw: float, max_low: int = 3) -> LinkConst:
    """NCCL's size regimes (``corrected.allreduce_time``): for one group size, every split of
    the sweep's knots into up to ``max_low`` lower regimes (low-latency, middle, then
    ``steps``: channel and algorithm switches; all within the first two thirds) below the
    p-norm is fitted and the split of least BIC (log residuals, three parameters per regime)
    kept; pooled group sizes fit one p-norm."""
    if len(ars) > 1:
        return _fit_pnorm(ars, bw)[0]
    x, y = (np.asarray(v) for v in binned_median(ars[0].bytes, ars[0].us))
    y = y * 1e-6
    n, tp = len(x), ars[0].tp
    ring = 2.0 * (tp - 1) / tp
    lin: dict[tuple[int, int], tuple[float, float]] = {}
    best: tuple[float, LinkConst] | None = None
    for top in range(0, 2 * n // 3):
        big, _ = _fit_pnorm(ars, bw, top)
        for cuts in _partitions(top, max_low):
            low = []
            for i, j in zip((0, *cuts[:-1]) if cuts else (), cuts, strict=True):
                if (i, j) not in lin:
                    lin[i, j] = _linear_regime(x[i:j], y[i:j], ring, bw)
                low.append((float(x[j - 1]), *lin[i, j]))
            names = ("ll", "mid")
            upd: dict[str, Any] = {}
            for r, (upto, us, eta) in zip(names, low, strict=False):
                upd |= {f"{r}_bytes": upto, f"{r}_us": us, f"{r}_eta": eta}
            lc = big.model_copy(update={**upd, "steps": low[2:]})
            sse = float(np.sum(np.log(allreduce_time(x, tp, bw, lc) / y) ** 2))
            bic = n * math.log(max(sse, 1e-12) / n) + (4 + 3 * len(low)) * math.log(n)
            if best is None or bic < best[0]:
                best = (bic, lc)
    assert best is not None
    return best[1]


def tp_capped(p: GPUProfile, per_octave: int = 4) -> GPUProfile:
    """Rule R1 (``bench/HISTORY.md``, session 24): on one node and link kind an all-reduce
    over ``tp`` GPUs is never slower than over more GPUs at the same message size (fewer ring
    steps on the same links), so from the largest group down each sample at ``tp`` is capped
    at the (capped) median of the same 1/``per_octave``-octave bin at the next larger group
    size; a bin the larger group lacks caps nothing. The profile otherwise unchanged."""
    out = []
    caps: dict[str, dict[int, float]] = {}
    for a in sorted(p.all_reduce, key=lambda a: (a.link, -a.tp)):
        x = np.asarray(a.bytes, dtype=float)
        b = np.floor(np.log2(x) * per_octave).astype(np.int64)
        cap = caps.get(a.link, {})
        us = [min(float(t), cap.get(int(k), math.inf)) for t, k in zip(a.us, b, strict=True)]
        caps[a.link] = {int(k): float(np.median([u for u, kk in zip(us, b, strict=True)
                                                if kk == k])) for k in np.unique(b)}  # fmt: skip
        out.append(a.model_copy(update={"us": us}))
    return p.model_copy(update={"all_reduce": out})


_LINK_FITS: dict[tuple[Any, ...], LinkConst] = {}


def _fit_link_memo(ars: Sequence[Any], bw: float) -> LinkConst:
    """``_fit_link``, memoised on the sweeps' values (hold-out splits refit the same sweeps)."""
    key = (bw, *((a.tp, tuple(a.bytes), tuple(a.us)) for a in ars))
    if key not in _LINK_FITS:
        _LINK_FITS[key] = _fit_link(ars, bw)
    return _LINK_FITS[key]


def fit_links(profiles: Iterable[GPUProfile]) -> dict[str, LinkConst]:
    """Per (GPU, link) over all group sizes, and per (GPU, link, TP)."""
    out: dict[str, LinkConst] = {}
    for p in profiles:
        gpu = get_gpu(p.gpu)
        for link in sorted({a.link for a in p.all_reduce}):
            bw = gpu.pcie_gbs * 1e9 if link == "pcie" else gpu.peer_bw
            ars = [a for a in p.all_reduce if a.link == link]
            out[f"{p.gpu}/{link}"] = _fit_link_memo(ars, bw)
            for a in ars:
                out[f"{p.gpu}/{link}/tp{a.tp}"] = _fit_link_memo([a], bw)
    return out


def fit_attention(p: GPUProfile, eta_b: float) -> AttentionConst:
    """Decode (t0, t1, η_A) and prefill (t0, η_P) on the profile's first attention table."""
    a = p.attention[0]
    gpu = get_gpu(p.gpu)
    kvb = 2.0 * a.kv_heads * a.head_dim * 2
    assert a.decode is not None
    assert a.prefill is not None
    rows, ts = [], []
    for b, r in zip(a.decode.rows, a.decode.us, strict=True):
        for c, v in zip(a.decode.cols, r, strict=True):
            if v:
                rows.append([1e-6, 1e-6 * b, kvb * b * c / gpu.mem_bw])
                ts.append(v * 1e-6)
    cd = _wlstsq(np.array(rows), np.array(ts))
    rows, ts = [], []
    for ch, r in zip(a.prefill.rows, a.prefill.us, strict=True):
        for s, v in zip(a.prefill.cols, r, strict=True):
            if v:
                read = kvb * (s + ch) / (eta_b * gpu.mem_bw)
                rows.append([1e-6, 2.0 * a.q_heads * a.head_dim * ch * (2 * s + ch) / gpu.flops])
                ts.append(v * 1e-6 - read)
    cp = _wlstsq(np.array(rows), np.maximum(np.array(ts), 1e-7))
    return AttentionConst(
        decode_t0_us=max(float(cd[0]), 0.0),
        decode_per_seq_us=max(float(cd[1]), 0.0),
        decode_eta_bw=1.0 / max(float(cd[2]), 1e-3),
        prefill_t0_us=max(float(cp[0]), 0.0),
        prefill_eta_flops=1.0 / max(float(cp[1]), 1e-3),
    )


def fit_host(p: GPUProfile, consts: RooflineConstants) -> HostConst:
    from tidal.hardware.corrected import CorrectedRooflinePerfModel

    rows, ts = [], []
    for h in p.host:
        model = CorrectedRooflinePerfModel(get_model(h.model), get_gpu(p.gpu), h.tp, consts)
        keys = ("schedule", "sampler", "prepare_inputs", "process_outputs")
        tot = np.sum([fill_row(h.ms[k]) for k in keys], axis=0) * 1e-3
        for b, t in zip(h.batch, tot, strict=True):
            rows.append([1e-6, 1e-6 * b])
            ts.append(t - model.head_s(b))
    c = _wlstsq(np.array(rows), np.maximum(np.array(ts), 1e-6))
    return HostConst(step_us=max(float(c[0]), 0.0), per_seq_us=max(float(c[1]), 0.0))


def fit_all(
    profiles: Sequence[GPUProfile],
    exclude_model: str | None = None,
    gemm_profiles: Sequence[GPUProfile] | None = None,
    m_tile: int = 0,
    p_by: str = "",
) -> RooflineConstants:
    """All constants. GEMM and elementwise fits see ``gemm_profiles`` (default: all) without
    ``exclude_model``; links, attention and host see ``profiles``."""
    lins = linears(gemm_profiles if gemm_profiles is not None else profiles, exclude_model)
    gemm, per = fit_gemm(lins, m_tile, p_by)
    consts = RooflineConstants(
        fitted_on=sorted({f"{x.gpu}/{x.ops.model}/tp{x.ops.tp}" for x in lins}),
        gemm=gemm,
        gpu=per,
        family=FAMILY,
        elementwise=fit_elementwise(lins),
        link=fit_links(profiles),
        link_borrowed=fit_links([tp_capped(p) for p in profiles]),
    )
    att = next((p for p in profiles if p.attention), None)
    if att is not None:
        ref = per.get(att.gpu, next(iter(per.values())))
        consts.attention = fit_attention(att, ref.eta_bw)
    host = next((p for p in profiles if p.host and p.gpu == "a100-80gb"), None)
    if host is not None:
        consts.host = fit_host(host, consts)
    from host_fit import fit_vllm_v1_host

    consts.hosts = {"vllm-v1": fit_vllm_v1_host(consts)}
    return consts
