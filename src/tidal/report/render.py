"""``report.html`` (self-contained: figures embedded as base64 PNG) or ``report.md`` (figures
linked from ``figures/``) for a run, sweep, plan or set of runs."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

import polars as pl

from tidal.core.errors import ConfigError
from tidal.core.io import atomic_write
from tidal.report.collect import Results, collect
from tidal.report.describe import describe, differences
from tidal.report.figure_base import _title
from tidal.report.figures import FigureFile, FigureProgress, all_figures, run_config

HEADLINE = (
    ("num_completed", "completed", "{:,.0f}"),
    ("request_throughput", "req/s", "{:.2f}"),
    ("token_throughput", "tok/s", "{:,.0f}"),
    ("roofline_token_throughput", "roofline tok/s", "{:,.0f}"),
    ("ttft_p50_s", "TTFT p50 s", "{:.3f}"),
    ("ttft_p99_s", "TTFT p99 s", "{:.3f}"),
    ("tpot_p50_s", "TPOT p50 ms", "ms"),
    ("tpot_p99_s", "TPOT p99 ms", "ms"),
    ("goodput", "goodput req/s", "{:.2f}"),
    ("slo_attainment", "SLO attainment", "{:.1%}"),
)
MAX_TABLE_ROWS = 60


def _cell(v: Any, fmt: str) -> str:
    if v is None:
        return "—"
    if fmt == "ms":
        return f"{v * 1e3:.1f}"
    try:
        return fmt.format(v)
    except (ValueError, TypeError):
        return str(v)


Table = tuple[list[str], list[list[str]]]


def runs_table(res: Results) -> Table:
    runs = res.runs[:MAX_TABLE_ROWS]
    _, labels = differences([run_config(r) for r in runs]) if runs else ([], [])
    head = ["run"] + [h for _, h, _ in HEADLINE]
    rows = [
        [label] + [_cell(r.metrics.get(k), f) for k, _, f in HEADLINE]
        for r, label in zip(runs, labels, strict=True)
    ]
    return head, rows


def plan_table(plan: dict[str, Any]) -> Table:
    head = ["#", "deployment", "GPUs", "GPU-hours", "$", "TTFT p99 s", "TPOT p99 ms"]
    rows = []
    for i, c in enumerate(plan.get("candidates", [])[:MAX_TABLE_ROWS]):
        m = c.get("metrics", {})
        rows.append(
            [
                str(i + 1) + (" (best)" if i == 0 else ""),
                c.get("label", ""),
                str(c.get("num_gpus")),
                f"{c.get('gpu_hours', 0):.2f}",
                f"{c.get('dollars', 0):.2f}",
                _cell(m.get("ttft_p99_s"), "{:.3f}"),
                _cell(m.get("tpot_p99_s"), "ms"),
            ]
        )
    return head, rows


def sweep_table(res: Results) -> Table | None:
    path = res.file("results.parquet")
    if path is None or res.sweep is None:
        return None
    df = pl.read_parquet(path)
    keys = [k for k in res.sweep.get("grid", {}) if k in df.columns]
    cols = keys + [k for k, _, _ in HEADLINE if k in df.columns]
    head = keys + [h for k, h, _ in HEADLINE if k in df.columns]
    fmts = ["{}"] * len(keys) + [f for k, _, f in HEADLINE if k in df.columns]
    rows = [
        [_cell(v, f) for v, f in zip(row, fmts, strict=True)]
        for row in df.select(cols).head(MAX_TABLE_ROWS).iter_rows()
    ]
    return head, rows


def _summary_lines(res: Results) -> list[str]:
    lines = [f"Results: `{res.path}` ({res.kind}, {len(res.runs)} run(s))."]
    if res.kind not in ("plan", "sweep") and res.runs:
        lines.append(f"Configuration: {_title(res.runs)[0]}.")
    if res.kind == "plan" and res.plan is not None:
        p = res.plan
        best = p.get("best")
        slo = ", ".join(f"{k} ≤ {v:g} s" for k, v in p.get("slo", {}).items() if v is not None)
        lines.append(f"SLO: {slo}. Objective: {p.get('objective')}.")
        if best:
            lines.append(
                f"**Best:** {best['label']} — {best['num_gpus']} GPU(s), "
                f"{best['gpu_hours']:.2f} GPU-hours, ${best['dollars']:.2f}."
            )
        else:
            lines.append("**No deployment in the search space meets the SLO.**")
        lines.append(
            f"Simulations run: {p.get('simulations_run')} (the exhaustive grid would need "
            f"{p.get('exhaustive_simulations')})."
        )
    if res.kind == "sweep" and res.sweep is not None:
        grid = res.sweep.get("grid", {})
        axes = "; ".join(f"{k} ∈ {{{', '.join(map(str, v))}}}" for k, v in grid.items())
        n = len(res.sweep.get("cells", []))
        lines.append(f"Grid: {axes or 'one cell'} — {n} cells, {len(res.runs)} finished.")
        base = run_config(res.runs[0]) if res.runs else res.sweep.get("base", {})
        lines.append(f"Base: {describe(base, skip=list(grid))}.")
    return lines


# ---------------------------------------------------------------------------- HTML
_CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:12px;margin:1em 0}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}
td:first-child,th:first-child{text-align:left}
figure{margin:2em 0} img{max-width:100%} figcaption{font-size:13px;color:#444}
h3{font-size:14px;margin-bottom:.3em}
"""


def _html_table(t: Table) -> str:
    head, rows = t
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows
    )
    return f"<table><tr>{th}</tr>{body}</table>"


def _md_inline(text: str) -> str:
    """``code`` and **bold** of the summary lines, for HTML."""
    out = html.escape(text)
    parts = out.split("`")
    out = "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))
    parts = out.split("**")
    return "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))


def to_html(res: Results, figs: list[FigureFile]) -> str:
    out = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>Tidal report — {html.escape(res.path.name)}</title><style>{_CSS}</style>",
        "</head><body><h1>Tidal report</h1>",
    ]
    out += [f"<p>{_md_inline(line)}</p>" for line in _summary_lines(res)]
    if res.kind == "plan" and res.plan is not None and res.plan.get("candidates"):
        out += ["<h2>Deployments meeting the SLO</h2>", _html_table(plan_table(res.plan))]
    st = sweep_table(res) if res.kind == "sweep" else None
    if st is not None:
        out += ["<h2>Sweep results</h2>", _html_table(st)]
    elif res.runs:
        out += ["<h2>Runs</h2>", _html_table(runs_table(res))]
    out.append("<h2>Figures</h2>")
    for f in figs:
        data = base64.b64encode(f.path.read_bytes()).decode()
        out.append(
            f"<figure><h3>{html.escape(f.name or f.title)}</h3>"
            f"<img alt='{html.escape(f.path.name)}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{html.escape(f.caption)}</figcaption></figure>"
        )
    out.append("</body></html>\n")
    return "\n".join(out)


# ---------------------------------------------------------------------------- Markdown
def _md_table(t: Table) -> str:
    head, rows = t
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines)


def to_markdown(res: Results, figs: list[FigureFile]) -> str:
    out = ["# Tidal report", ""]
    out += [line + "\n" for line in _summary_lines(res)]
    if res.kind == "plan" and res.plan is not None and res.plan.get("candidates"):
        out += ["## Deployments meeting the SLO", "", _md_table(plan_table(res.plan)), ""]
    st = sweep_table(res) if res.kind == "sweep" else None
    if st is not None:
        out += ["## Sweep results", "", _md_table(st), ""]
    elif res.runs:
        out += ["## Runs", "", _md_table(runs_table(res)), ""]
    out += ["## Figures", ""]
    for f in figs:
        rel = f.path.relative_to(res.path)
        out += [
            f"### {f.name or f.title}",
            "",
            f"![{f.path.stem}]({rel.as_posix()})",
            "",
            f.caption,
            "",
        ]
    return "\n".join(out)


def render_report(
    path: str | Path, fmt: str = "html", progress: FigureProgress | None = None
) -> tuple[Path, list[FigureFile]]:
    """Draw every applicable figure into ``DIR/figures/`` and write ``DIR/report.{html,md}``;
    ``progress`` hears of each figure before it is drawn."""
    if fmt not in ("html", "md"):
        raise ConfigError("format", f"unknown value {fmt!r}", "html or md")
    res = collect(path)
    figs = all_figures(res, res.path / "figures", progress)
    text = to_html(res, figs) if fmt == "html" else to_markdown(res, figs)
    target = res.path / f"report.{fmt}"

    def write(p: Path) -> None:
        p.write_text(text)

    atomic_write(target, write)
    return target, figs
