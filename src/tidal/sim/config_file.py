"""Reading a YAML config file (``--config``): the mapping it holds, refused with a named error
when it is missing, not a file, binary, huge, invalid YAML or an alias bomb
(:mod:`tidal.core.yaml_safe`); and its relative ``policy_modules`` paths resolved against the
file's directory, not the working directory (as docker-compose resolves a compose file's
paths), so that a config runs the same from any directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tidal.core.errors import ConfigError
from tidal.core.plugins import FIX, is_path
from tidal.core.yaml_safe import safe_load_bounded

MAX_CONFIG_BYTES = 16 << 20
"""A config file larger than this is refused before it is read."""

POLICY_KEYS = (("policy_modules",), ("base", "policy_modules"))
"""Where a config names policy modules: a simulation or sweep config, a plan's ``base``."""


def load_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping of the YAML config file at ``path``, its ``policy_modules`` paths made
    absolute against the file's directory (module docstring)."""
    p = Path(path)
    if not p.exists():
        raise ConfigError("config", f"file {p} does not exist", "give the path of a YAML file")
    if not p.is_file():
        raise ConfigError("config", f"{p} is not a file", "give the path of a YAML file")
    if p.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(
            "config", f"{p} is over {MAX_CONFIG_BYTES >> 20} MiB", "a config is a few KiB of YAML"
        )
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            "config", f"{p} is not UTF-8 text (byte {err.start})", "give a YAML file"
        ) from None
    try:
        data = safe_load_bounded(text, str(p)) or {}
    except yaml.YAMLError as err:
        raise ConfigError("config", f"{p} is not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError("config", f"{p} must hold a mapping of settings")
    for keys in POLICY_KEYS:
        _resolve_policy_modules(data, keys, p)
    return data


def _resolve_policy_modules(data: dict[str, Any], keys: tuple[str, ...], path: Path) -> None:
    """Each path of ``data[keys…]`` (a list, or one string) made absolute against ``path``'s
    directory; a module name and an absolute path stay as given. A path that names no file is
    an error naming the key and the resolved path."""
    *outer, last = keys
    holder: Any = data
    for k in outer:
        holder = holder.get(k) if isinstance(holder, dict) else None
    if not isinstance(holder, dict) or last not in holder:
        return
    given = holder[last]
    specs = [given] if isinstance(given, str) else given
    if not isinstance(specs, list):
        return  # the config model's type error says what to give
    out: list[Any] = []
    for spec in specs:
        if isinstance(spec, str) and is_path(spec):
            resolved = (path.resolve().parent / Path(spec).expanduser()).resolve()
            if not resolved.is_file():
                raise ConfigError(
                    ".".join(keys),
                    f"{spec!r} resolves to {str(resolved)!r} (relative to the config file "
                    f"{str(path)!r}), which is not a file",
                    FIX,
                )
            spec = str(resolved)
        out.append(spec)
    holder[last] = out if isinstance(given, list) else out[0]
