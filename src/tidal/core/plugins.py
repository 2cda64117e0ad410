"""Policies from outside the package: ``--policy-module PATH`` (config key ``policy_modules``)
imports a Python file, or an importable module by name, before any registry is read, so that a
policy written in one file registers itself (``@BATCHING.register("name")``) and is selected by
its name like a built-in one. Each file is imported once per process, whatever the number of
configs that name it (a sweep validates many), so a registration never runs twice."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from tidal.core.errors import ConfigError

FIX = "--policy-module takes the path of a .py file or an importable module name"

_loaded: dict[str, ModuleType] = {}
"""Resolved path or module name → the module imported for it."""


def is_path(spec: str) -> bool:
    """A file path (a ``.py`` name, or one with a separator), not a module name."""
    return spec.endswith(".py") or "/" in spec or "\\" in spec


def _import_file(path: Path, field: str) -> ModuleType:
    """Import the file at ``path`` as a module of its own name (its stem and a hash of its
    path: two files of one name do not collide), registered in ``sys.modules``."""
    if not path.is_file():
        raise ConfigError(field, f"{str(path)!r} is not a file", FIX)
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:8]
    name = f"tidal_policy_module_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(field, f"{str(path)!r} cannot be imported as Python", FIX)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # the user's file failed: say which, and why
        del sys.modules[name]
        raise ConfigError(field, f"importing {str(path)!r} failed: {err!r}") from err
    return module


def _import_name(name: str, field: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        inner = "" if err.name == name else f" ({err})"
        raise ConfigError(field, f"no module named {name!r}{inner}", FIX) from None
    except Exception as err:
        raise ConfigError(field, f"importing module {name!r} failed: {err!r}") from err


def load_policy_modules(specs: Iterable[str], field: str = "policy_modules") -> list[ModuleType]:
    """Import each of ``specs`` (a file path, relative to the working directory — a config
    file's paths are made absolute against its directory when it is read — or a module
    name) once; a bad one raises a :class:`ConfigError` naming ``field`` and the flag."""
    modules = []
    for spec in specs:
        if is_path(spec):
            path = Path(spec).expanduser().resolve()
            key = str(path)
            if key not in _loaded:
                _loaded[key] = _import_file(path, field)
        else:
            key = spec
            if key not in _loaded:
                _loaded[key] = _import_name(spec, field)
        modules.append(_loaded[key])
    return modules
