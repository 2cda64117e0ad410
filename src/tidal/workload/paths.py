"""Where the shared public traces live, and how a trace name becomes a file path.

Search order of :func:`traces_dir`:

1. the environment variable ``TIDAL_TRACES_DIR`` (must name an existing directory);
2. a ``shared/traces`` directory in the current working directory or any of its parents;
3. a ``shared/traces`` directory beside any parent of this package's file.

A checkout that sits beside a ``shared/traces`` folder (``ROOT/../shared/traces``) therefore
finds it from inside the repository by either walk. :func:`resolve_trace` finally falls back to
the traces bundled with the package (``tidal/data/traces``: the Azure 2023 conversation trace,
so that ``tidal demo`` runs from any checkout).
"""

from __future__ import annotations

import os
from pathlib import Path

from tidal.core.errors import ConfigError

ENV_VAR = "TIDAL_TRACES_DIR"
_REL = Path("shared") / "traces"
BUNDLED = Path(__file__).resolve().parent.parent / "data" / "traces"


def _walk_up(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        candidate = folder / _REL
        if candidate.is_dir():
            return candidate
    return None


def traces_dir() -> Path:
    """The directory of shared traces (see the module docstring for the search order)."""
    env = os.environ.get(ENV_VAR)
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise ConfigError(
                ENV_VAR,
                f"{env!r} is not a directory",
                "point it at the shared/traces directory or unset it",
            )
        return path
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        found = _walk_up(start)
        if found is not None:
            return found
    raise ConfigError(
        "trace",
        "cannot find the shared/traces directory",
        f"set {ENV_VAR} or give the full path of the file",
    )


def resolve_trace(name_or_path: str | os.PathLike[str], field: str = "trace") -> Path:
    """An existing file or directory for ``name_or_path``.

    Tried in order: the path as given (``~`` expanded); the path relative to
    :func:`traces_dir`; the same with ``.gz`` appended; finally a bare file name is looked up
    anywhere below :func:`traces_dir` (``AzureLLMInferenceTrace_conv.csv.gz`` works).
    Raises :class:`ConfigError` naming ``field`` when nothing matches.
    """
    path = Path(name_or_path).expanduser()
    if path.exists():
        return path
    if not path.is_absolute():
        try:
            root = traces_dir()
        except ConfigError:
            root = None
        if root is not None:
            for candidate in (root / path, root / f"{path}.gz"):
                if candidate.exists():
                    return candidate
            if len(path.parts) == 1:
                for pattern in (path.name, f"{path.name}.gz"):
                    hits = sorted(root.rglob(pattern))
                    if hits:
                        return hits[0]
        for candidate in (BUNDLED / path, BUNDLED / f"{path}.gz"):
            if candidate.exists():
                return candidate
    raise ConfigError(
        field,
        f"no such trace file {str(name_or_path)!r}",
        "give an existing path or a file name under shared/traces",
    )
