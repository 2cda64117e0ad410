"""``tidal demo``."""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Annotated, Any

from tidal.cli.app import (
    Opt,
    TidalError,
    _deep_merge,
    _fail,
    _run_and_write,
    app,
    console,
    metrics_table,
)


@app.command()
def demo(
    out: Annotated[Path, Opt(help="Output directory (one sub-directory per variant).")] = Path(
        "tidal-demo"
    ),
    config: Annotated[Path | None, Opt(help="A demo YAML with `base` and `variants`.")] = None,
) -> None:
    """Replay a real trace through several configurations and compare them side by side."""
    # lazy: keeps tidal --help fast
    import yaml

    from tidal.sim.config import load_config, load_yaml

    try:
        if config is None:
            text = importlib.resources.files("tidal.configs").joinpath("demo.yaml").read_text()
            spec = yaml.safe_load(text)
        else:
            spec = load_yaml(config)
        base = spec.get("base", {})
        rows: dict[str, dict[str, Any]] = {}
        for name, over in spec.get("variants", {}).items():
            cfg = load_config(_deep_merge(base, over or {}))
            res = _run_and_write(cfg, out / name, show_progress=False)
            rows[name] = res.metrics
            console.print(
                f"  {name}: {res.metrics['num_requests']:,} requests simulated in "
                f"{res.run_info['simulate_s']:.2f} s"
            )
    except TidalError as err:
        _fail(err)
        return
    w = base.get("workload", {})
    title = f"{base.get('model')} on {base.get('gpu')} — {w.get('trace')} ×{w.get('rate_scale', 1)}"
    console.print(metrics_table(title, rows))
    console.print(f"results in {out}/<variant>/summary.json")
