"""Step-time accuracy against measured GPU kernels (issue 13): today's roofline, the corrected
roofline (held-out fits only) and the measured model (held-out shapes).

Truth: the kernel sum of a step from the Vidur profiles (``data/profiles``): L × the per-layer
operators at the step's token count + the embedding + 2L all-reduces (median-smoothed sweep) +,
where the GPU has an attention table of the deployment's per-GPU head shape, L × decode
attention at (batch, 1024 context) and prefill attention at (chunk, no cache). No LM head or
host time (the profiles have none), so each model is asked for the same kernel sum.

* ``roofline``: today's ``RooflinePerfModel`` (LM head and host overhead removed).
* ``corrected (LOMO)``: constants fitted with the deployment's model left out.
* ``corrected (A100→H100)``: constants fitted on A100 data only, predicting H100 deployments
  (the all-reduce constants A100's too, as for any borrowed link: fitted on the sweeps capped
  by rule R1, latencies × the NVLink ratio); ``…, H100's all-reduce sweep``: the same GPU
  constants with the H100 node's own all-reduce fit (no H100 kernel seen).
* ``measured (held-out)``: the profile with every other grid point removed (tokens, all-reduce
  sizes, attention rows), evaluated at the removed points.

    python bench/step_accuracy.py [--m-tile 128] [--p-by nk] [--ar-rule borrowed]
                                  [--write-constants]

``--m-tile T``: GEMM tile quantisation in M of every fit (default 128, the bundled form; 0:
none); ``--p-by nk``: the corner exponent grows with the weight matrix N·K (default; ``k``:
with K, empty: one p); ``--ar-rule``: rule R1 on borrowed sweeps (default), ``none`` or
``everywhere`` (every fit on capped sweeps; the truth keeps the measured ones). The worst
shapes are printed with the profile's own scatter there (the
measured step against the line through its two token-grid neighbours). ``--write-constants``
also fits on all data and writes ``data/profiles/roofline_fit.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import md_table, save
from roofline_fit import fit_all, fit_links, tp_capped

from tidal.hardware.corrected import CONSTANTS_PATH, CorrectedRooflinePerfModel
from tidal.hardware.gpus import get_gpu
from tidal.hardware.interp import Curve, binned_median
from tidal.hardware.measured import MeasuredPerfModel
from tidal.hardware.models import ModelSpec, get_model
from tidal.hardware.opprofile import (
    AllReduceOps,
    AttentionOps,
    Deployment,
    GPUProfile,
    Grid2D,
    LinearOps,
    bundled_profiles,
    deployment,
)
from tidal.hardware.perf import RooflinePerfModel

CTX = 1024
CLASSES: dict[str, list[tuple[int, int]]] = {  # (decodes, prefill tokens)
    "decode b<=32": [(b, 0) for b in (1, 2, 4, 8, 16, 32)],
    "decode b>=128": [(b, 0) for b in (128, 256, 512)],
    "prefill <=256": [(0, p) for p in (64, 128, 256)],
    "prefill >=512": [(0, p) for p in (512, 1024, 2048, 4096)],
    "mixed": [(16, 256), (32, 512), (64, 1024)],
}


def heads(m: ModelSpec) -> tuple[int, int, int]:
    return m.num_heads, m.num_kv_heads, m.d_head


class Truth:
    """Kernel sums of one deployment from its full profile."""

    def __init__(self, dep: Deployment, model: ModelSpec) -> None:
        self.dep, self.m = dep, model
        lin = dep.linear
        self.idx = {t: i for i, t in enumerate(lin.tokens)}
        self.layer = np.sum([np.asarray(v) for v in lin.layer_us.values()], axis=0) * 1e-6
        self.emb = np.asarray(lin.step_us["emb"]) * 1e-6
        self.ar = None
        if lin.tp > 1 and dep.all_reduce is not None:
            x, y = binned_median(dep.all_reduce.bytes, dep.all_reduce.us)
            self.ar = Curve(x, [v * 1e-6 for v in y])
        self.attn = dep.attention

    def kernel(self, b: int, p: int) -> float | None:
        """None when the shape is not on the measured grids."""
        t = b + p
        if t not in self.idx:
            return None
        i, L = self.idx[t], self.m.num_layers
        s = L * self.layer[i] + self.emb[i]
        if self.ar is not None:
            s += 2 * L * self.ar.at(t * self.m.hidden_size * self.m.dtype_bytes)
        if self.attn is None:
            return float(s)
        a = self.attn
        assert a.decode is not None
        assert a.prefill is not None
        if b:
            if b not in a.decode.rows or CTX not in a.decode.cols:
                return None
            v = a.decode.us[a.decode.rows.index(b)][a.decode.cols.index(CTX)]
            if v is None:
                return None
            s += L * v * 1e-6
        if p:
            if p not in a.prefill.rows:
                return None
            v = a.prefill.us[a.prefill.rows.index(p)][0]
            if v is None:
                return None
            s += L * v * 1e-6
        return float(s)


def shape_args(b: int, p: int, attn: bool) -> dict[str, Any]:
    return {
        "num_decodes": b,
        "decode_ctx": b * CTX if attn else 0,
        "prefill_tokens": p,
        "prefill_ctx": p if attn else 0,
        "num_prefills": 1 if p else 0,
        "prefill_attn": p * p if attn else 0,
        "attention": attn,
    }


def old_roofline(model: ModelSpec, gpu_name: str, tp: int, b: int, p: int, attn: bool) -> float:
    bare = dataclasses.replace(model, vocab_size=0)
    r = RooflinePerfModel(bare, get_gpu(gpu_name), tp, step_overhead_s=0.0, seq_overhead_s=0.0)
    a = shape_args(b, p, attn)
    return float(
        r.step_seconds(
            b, a["decode_ctx"], p, a["prefill_attn"], a["prefill_ctx"], a["num_prefills"]
        )
    )


def thin(dep: Deployment) -> Deployment:
    """Every other grid point removed (even indices kept, the last one too for tokens)."""

    def keep(n: int, last: bool = True) -> list[int]:
        k = list(range(0, n, 2))
        return [*k, n - 1] if last and k[-1] != n - 1 else k

    lin = dep.linear
    k = keep(len(lin.tokens))
    new_lin = LinearOps(
        model=lin.model, tp=lin.tp, shape=lin.shape, tokens=[lin.tokens[i] for i in k],
        layer_us={o: [v[i] for i in k] for o, v in lin.layer_us.items()},
        step_us={o: [v[i] for i in k] for o, v in lin.step_us.items()},
    )  # fmt: skip
    ar = dep.all_reduce
    if ar is not None:
        ka = keep(len(ar.bytes))
        ar = AllReduceOps(link=ar.link, tp=ar.tp, bytes=[ar.bytes[i] for i in ka],
                          us=[ar.us[i] for i in ka])  # fmt: skip
    att = dep.attention
    if att is not None:
        assert att.decode is not None
        assert att.prefill is not None

        def g2(g: Grid2D) -> Grid2D:
            kr, kc = keep(len(g.rows), False), keep(len(g.cols))
            return Grid2D(rows=[g.rows[i] for i in kr], cols=[g.cols[j] for j in kc],
                          us=[[g.us[i][j] for j in kc] for i in kr])  # fmt: skip

        att = AttentionOps(q_heads=att.q_heads, kv_heads=att.kv_heads, head_dim=att.head_dim,
                           decode=g2(att.decode), prefill=g2(att.prefill))  # fmt: skip
    return Deployment(dep.gpu, dep.source, new_lin, att, ar, None)


def held_out_shapes(dep: Deployment, thinned: Deployment) -> dict[str, list[tuple[int, int]]]:
    """Shapes whose token count (and attention cells) the thinned profile dropped."""
    kept = set(thinned.linear.tokens)
    drop = [t for t in dep.linear.tokens if t not in kept]
    a = thinned.attention
    rows_d = set(a.decode.rows) if a is not None and a.decode is not None else set()
    rows_p = set(a.prefill.rows) if a is not None and a.prefill is not None else set()
    att = a is not None

    def dec_ok(b: int) -> bool:
        return not att or (b <= 128 and b not in rows_d)

    def pre_ok(p: int) -> bool:
        return not att or (p >= 64 and p not in rows_p)

    out = {
        "decode b<=32": [(t, 0) for t in drop if t <= 32 and dec_ok(t)],
        "decode b>=128": [(t, 0) for t in drop if 128 <= t <= 512 and dec_ok(t)],
        "prefill <=256": [(0, t) for t in drop if t <= 256 and pre_ok(t)],
        "prefill >=512": [(0, t) for t in drop if t >= 512 and pre_ok(t)],
        "mixed": [
            (b, t - b)
            for t in drop
            for b in (8, 16, 32)
            if t - b >= 64 and t <= 1536 and dec_ok(b) and pre_ok(t - b)
        ],
    }
    return out


def errors(preds: list[float], truths: list[float]) -> tuple[float, float]:
    e = [abs(p / t - 1.0) for p, t in zip(preds, truths, strict=True)]
    return statistics.median(e), max(e)


def cross_constants(
    profiles: list[GPUProfile], m_tile: int, p_by: str = "", ar_rule: str = "borrowed"
) -> tuple[Any, Any]:
    """Constants fitted on A100 data only, for H100: strictly (A100's all-reduce constants too,
    through the family map) and with the H100 node's own all-reduce sweep (model-independent:
    what ``nccl-tests`` on a new node gives before any model is profiled). H100 borrows A100's
    R1-capped fits (``link_borrowed``) as any GPU without a sweep does; ``ar_rule`` ``none``:
    A100's own fits instead (the form before session 24)."""
    a100 = [p for p in profiles if p.gpu == "a100-80gb"]
    strict = fit_all(a100, m_tile=m_tile, p_by=p_by)
    if ar_rule == "none":
        strict.link_borrowed = {}
    strict.family = {"h100": "a100-80gb", **strict.family}
    own = strict.model_copy(deep=True)
    h100 = fit_links([p for p in profiles if p.gpu == "h100"])
    own.link = {**strict.link, **h100}
    return strict, own


def evaluate(args: argparse.Namespace) -> dict[str, Any]:
    profiles = bundled_profiles()
    # rule R1 everywhere: every fit sees capped sweeps (the truth keeps the measured ones)
    fits = [tp_capped(p) for p in profiles] if args.ar_rule == "everywhere" else profiles
    t0 = time.perf_counter()
    models = sorted({x.model for p in profiles for x in p.linear})
    lomo = {m: fit_all(fits, exclude_model=m, m_tile=args.m_tile, p_by=args.p_by)
            for m in models}
    strict, own = cross_constants(fits, args.m_tile, args.p_by, args.ar_rule)
    fit_s = time.perf_counter() - t0
    rows: list[dict[str, Any]] = []
    for prof in profiles:
        for lin in prof.linear:
            model = get_model(lin.model)
            dep = deployment(prof.gpu, lin.model, lin.tp, (prof,), heads(model))
            assert dep is not None
            variants = {"corrected_lomo": lomo[lin.model]}
            if prof.gpu == "h100":
                variants |= {"corrected_a100_to_h100": strict, "corrected_a100_to_h100_ar": own}
            rows += evaluate_deployment(prof, dep, model, variants)
    return {"rows": rows, "fit_s": fit_s, "lomo_models": models}


def roughness(truth: Truth, b: int, p: int, window: float = 1.25) -> float | None:
    """The profile's own scatter near the step's token count T: over the grid points in
    [T/w, T·w], the largest departure of the token-dependent kernels (GEMMs, elementwise,
    all-reduce; no attention) from what every roofline-type model obeys — time never falls
    as tokens grow, time per token never rises: max over t1 < t2 of k(t1)/k(t2) − 1 and of
    (k(t2)/t2)/(k(t1)/t1) − 1. A kernel switch (a cliff in the profile) shows as a large
    value; a smooth model cannot be closer than ≈ half of it on both sides."""
    t = b + p
    L, m = truth.m.num_layers, truth.m
    pts = []
    for tok, i in sorted(truth.idx.items()):
        if t / window <= tok <= t * window:
            k = L * truth.layer[i] + truth.emb[i]
            if truth.ar is not None:
                k += 2 * L * truth.ar.at(tok * m.hidden_size * m.dtype_bytes)
            pts.append((tok, float(k)))
    if len(pts) < 2:
        return None
    worst = 0.0
    for j, (t2, k2) in enumerate(pts):
        for t1, k1 in pts[:j]:
            worst = max(worst, k1 / k2 - 1.0, (k2 / t2) / (k1 / t1) - 1.0)
    return worst


def evaluate_deployment(
    prof: GPUProfile, dep: Deployment, model: ModelSpec, variants: dict[str, Any]
) -> list[dict[str, Any]]:
    """``variants``: column name → corrected-roofline constants (held out from this one)."""
    gpu, tp = get_gpu(prof.gpu), dep.linear.tp
    truth = Truth(dep, model)
    attn = dep.attention is not None
    cr = CorrectedRooflinePerfModel(model, gpu, tp, variants["corrected_lomo"])
    thinned = thin(dep)
    meas = MeasuredPerfModel(thinned, model, gpu, tp, cr)
    out = []
    key = f"{prof.gpu}/{model.name}/tp{tp}" + (" (+attn)" if attn else "")
    for cls, shapes in CLASSES.items():
        pts = [(b, p, truth.kernel(b, p)) for b, p in shapes]
        pts = [(b, p, t) for b, p, t in pts if t is not None]
        if not pts:
            continue
        tr = [t for _, _, t in pts]
        row: dict[str, Any] = {"deployment": key, "gpu": prof.gpu, "class": cls, "n": len(pts)}
        row["roofline"] = errors([old_roofline(model, prof.gpu, tp, b, p, attn)
                                  for b, p, _ in pts], tr)  # fmt: skip
        for col, consts in variants.items():
            perf = CorrectedRooflinePerfModel(model, gpu, tp, consts)
            pr = [perf.kernel_seconds(**shape_args(b, p, attn)) for b, p, _ in pts]
            row[col] = errors(pr, tr)
            e = [abs(x / t - 1) for x, t in zip(pr, tr, strict=True)]
            w = int(np.argmax(e))
            row[col + "_worst_shape"] = pts[w][:2]
            row[col + "_worst_roughness"] = roughness(truth, *pts[w][:2])
        out.append(row)
    for cls, shapes in held_out_shapes(dep, thinned).items():
        pts = [(b, p, truth.kernel(b, p)) for b, p in shapes]
        pts = [(b, p, t) for b, p, t in pts if t is not None]
        if pts:
            pr = [meas.kernel_seconds(**shape_args(b, p, attn)) for b, p, _ in pts]
            row = next((r for r in out if r["class"] == cls), None)
            if row is not None:
                row["measured_heldout"] = errors(pr, [t for _, _, t in pts])
                row["n_measured"] = len(pts)
    return out


def worst_shapes(rows: list[dict[str, Any]], cols: list[str], k: int = 6) -> None:
    """The (deployment, class, shape) of the largest errors, per corrected column."""
    for col in cols:
        sel = sorted((r for r in rows if col in r), key=lambda r: -r[col][1])[:k]
        items = []
        for r in sel:
            rough = r.get(col + "_worst_roughness")
            noise = "–" if rough is None else f"{100 * rough:.0f} %"
            items.append(f"{r['deployment']} {r['class']} (b, p)={tuple(r[col + '_worst_shape'])}"
                         f" {100 * r[col][1]:.0f} % (scatter {noise})")  # fmt: skip
        over = sum(r[col][1] > 0.25 for r in rows if col in r)
        total = sum(col in r for r in rows)
        print(f"worst of {col} ({over} of {total} cells > 25 %): " + "; ".join(items))


def summarize(rows: list[dict[str, Any]], col: str, where: Any = None) -> tuple[str, str, str]:
    sel = [r for r in rows if col in r and (where is None or where(r))]
    if not sel:
        return "–", "–", "0"
    med = statistics.median(r[col][0] for r in sel)
    worst = max(r[col][1] for r in sel)
    return f"{100 * med:.1f} %", f"{100 * worst:.1f} %", str(len(sel))


def report(res: dict[str, Any]) -> None:
    rows = res["rows"]
    cols = [("roofline", None), ("corrected_lomo", None), ("corrected_a100_to_h100", None),
            ("corrected_a100_to_h100_ar", None), ("measured_heldout", None)]  # fmt: skip
    table = []
    for cls in CLASSES:
        cells = [cls]
        for col, _ in cols:
            med, worst, _n = summarize(rows, col, lambda r, c=cls: r["class"] == c)
            cells.append(f"{med} / {worst}")
        table.append(cells)
    cells = ["all"]
    for col, _ in cols:
        med, worst, _n = summarize(rows, col)
        cells.append(f"{med} / {worst}")
    table.append(cells)
    print("median of per-(deployment, class) median |error| / worst |error|")
    heads_ = ["class", "today's roofline", "corrected (LOMO)", "corrected (A100→H100)"]
    heads_ += ["corrected (A100→H100, H100's all-reduce sweep)", "measured (held-out shapes)"]
    print(md_table(heads_, table))
    worst_shapes(rows, [c for c, _ in cols if c.startswith("corrected")])
    per_dep = []
    for dep in sorted({r["deployment"] for r in rows}):
        sel = [r for r in rows if r["deployment"] == dep]

        def fmt(col: str, sel: list[dict[str, Any]] = sel) -> str:
            vals = [r[col] for r in sel if col in r]
            if not vals:
                return "–"
            med = 100 * statistics.median(v[0] for v in vals)
            return f"{med:.0f}/{100 * max(v[1] for v in vals):.0f}"

        per_dep.append([dep, fmt("roofline"), fmt("corrected_lomo"),
                        fmt("corrected_a100_to_h100"), fmt("corrected_a100_to_h100_ar"),
                        fmt("measured_heldout")])  # fmt: skip
    print("\nper deployment (median/worst |error| %, over classes)")
    print(md_table(["deployment", "roofline", "corrected LOMO", "corrected A100→H100",
                    "A100→H100 + H100 all-reduce", "measured held-out"], per_dep))  # fmt: skip


def paper_cross_check() -> list[list[str]]:
    """Whole steps (LM head and host included) against the papers' measured linear models,
    which no fit here saw: EB paper Qwen3-8B on H200 and RTX PRO 6000 (vLLM eager), INFERCEPT
    GPT-J-6B on A100 (It(N) = αN + γ). Ratio = model ÷ paper."""
    from tidal.hardware.calibration import CALIBRATIONS, build_perf_model

    rows = []
    for (mname, gname, tp), cal in CALIBRATIONS.items():
        if tp != 1:
            continue
        model, gpu = get_model(mname), get_gpu(gname)
        paper = build_perf_model("linear", model, gpu, tp)
        ctx = cal.ctx_ref
        shapes = [(f"decode {b}", b, b * ctx, 0) for b in (16, 64, 256)]
        shapes += [(f"prefill {p}", 0, 0, p) for p in (512, 2048)]
        for perf_name in ("roofline", "corrected-roofline"):
            perf = build_perf_model(perf_name, model, gpu, tp)
            ratios = []
            for _label, b, c, p in shapes:
                args = (b, c, p, p * p, p, 1 if p else 0)
                ratios.append(perf.step_ns(*args) / paper.step_ns(*args))
            cells = [f"{sh[0]} {r:.2f}" for sh, r in zip(shapes, ratios, strict=True)]
            rows.append([f"{mname}/{gname}", perf_name, " · ".join(cells)])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write-constants", action="store_true")
    ap.add_argument("--m-tile", type=int, default=128,
                    help="GEMM tile quantisation in M of every fit (0: none)")  # fmt: skip
    ap.add_argument("--p-by", default="nk", choices=["", "k", "nk"],
                    help="fit the GEMM corner exponent's growth with K or N·K (empty: off)")
    ap.add_argument("--ar-rule", default="borrowed", choices=["none", "borrowed", "everywhere"],
                    help="rule R1 (a node's smaller group is never slower) on borrowed sweeps "
                         "only (default, as the bundled model), nowhere, or on every sweep "
                         "before every fit")  # fmt: skip
    args = ap.parse_args()
    res = evaluate(args)
    res["m_tile"], res["p_by"], res["ar_rule"] = args.m_tile, args.p_by, args.ar_rule
    report(res)
    print("\ncross-check: whole steps ÷ the papers' measured step models (not fitted here)")
    cross = paper_cross_check()
    print(md_table(["deployment", "model", "ratio by shape"], cross))
    res["paper_cross_check"] = cross
    if args.write_constants:
        consts = fit_all(bundled_profiles(), m_tile=args.m_tile, p_by=args.p_by)
        CONSTANTS_PATH.write_text(consts.model_dump_json(indent=1) + "\n")
        print(f"wrote {CONSTANTS_PATH}")
    save("step_accuracy" + ("" if args.ar_rule == "borrowed" else f"_{args.ar_rule}"), res)
    print(f"fits: {res['fit_s']:.1f} s")


if __name__ == "__main__":
    main()
