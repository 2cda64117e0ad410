"""The ``tidal`` command line: one module per command group, each registering on ``app``
(:mod:`tidal.cli.app`); importing this package registers them all. Heavy imports stay inside
the commands so that ``tidal --help`` is fast."""

from tidal.cli import (  # noqa: F401  (each registers its commands on app)
    bench,
    calibrate,
    demo,
    ebplus,
    fidelity,
    hardware,
    plan,
    profile_gpu,
    report,
    serve,
    simulate,
    sweep,
    trace,
)
from tidal.cli.app import (
    UNWRAPPED_WIDTH,
    Opt,
    TidalError,
    _deep_merge,
    _fail,
    _parse_rate,
    app,
    console,
    err_console,
    main,
    metrics_table,
    on_interrupt,
)

__all__ = [
    "UNWRAPPED_WIDTH",
    "Opt",
    "TidalError",
    "_deep_merge",
    "_fail",
    "_parse_rate",
    "app",
    "console",
    "err_console",
    "main",
    "metrics_table",
    "on_interrupt",
]
