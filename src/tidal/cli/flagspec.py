"""Declarative command-line flags: one :class:`Flag` per option (names, type, help, the default
the config applies, config key), from which both a command's typer options and its flags →
config mapping are derived.

A command takes its table's flags as one ``flags: dict`` parameter::

    @app.command()
    @SIMULATE.options
    def simulate(out: ..., flags: dict[str, Any]) -> None:
        data = _deep_merge(yaml_data, SIMULATE.config(flags))

Rules of :meth:`FlagTable.config`: a flag left unset (``None``) sets nothing; a switch (a bool
flag with ``switch``) sets its key to ``switch`` when given; ``convert`` maps the typed value to
the config value; two flags of one key (``--arrival-cv``, ``--burstiness``) may not both be given;
an ``axis`` flag (``tidal plan``) adds a list under ``search[key]``, not a value at ``key``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Annotated, Any

import typer
from rich.markup import escape

from tidal.core.errors import ConfigError, TidalError

UNSET = object()


@dataclasses.dataclass(frozen=True)
class Flag:
    """One option: ``name`` is its parameter name (``--name-with-dashes`` unless ``decls``)."""

    name: str
    type: Any
    help: str
    key: str | None = None
    """Dotted config key the value goes to (None: the command reads it itself)."""
    decls: tuple[str, ...] = ()
    """Tidal's names, first the main one (default ``--name-with-dashes``)."""
    vllm: tuple[str, ...] = ()
    """vLLM's names of the same idea (also ``sweep --grid`` keys, dashes as underscores)."""
    shows: Any = None
    """The default the config applies when the flag is unset, listed in ``--help``."""
    default: Any = None
    convert: Callable[[Any], Any] | None = None
    switch: Any = UNSET
    axis: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        own = self.decls or ("--" + self.name.replace("_", "-"),)
        return own + tuple(v for v in self.vllm if v not in own)

    def help_text(self) -> str:
        """The help as shown: typer reads it as rich markup, so brackets are escaped (a
        registry's ``[options: scheduler.eb]`` would vanish as an unknown tag)."""
        text = self.help if self.shows is None else f"{self.help} (default: {self.shows})"
        return escape(text)

    def parameter(self) -> inspect.Parameter:
        option = typer.Option(*self.names, help=self.help_text())
        return inspect.Parameter(
            self.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=self.default,
            annotation=Annotated[self.type, option],
        )

    def value(self, raw: Any) -> Any:
        """The config value of a given flag (None: the flag sets nothing)."""
        if self.switch is not UNSET:
            return self.switch if raw else None
        if raw is None:
            return None
        return self.convert(raw) if self.convert is not None else raw

    def prefixed(self, prefix: str) -> Flag:
        return dataclasses.replace(self, key=prefix + self.key) if self.key else self


def typed_spelling(spellings: Iterable[str], argv: Sequence[str]) -> str | None:
    """Which of an option's ``spellings`` ``argv`` gives (``--name VALUE`` or
    ``--name=VALUE``; the last one given wins, as in click), or None."""
    names = set(spellings)
    found = None
    for token in argv:
        name = token.split("=", 1)[0] if token.startswith("--") else token
        if name in names:
            found = name
    return found


def typed_name(flag: Flag, argv: Sequence[str]) -> str | None:
    """The spelling of ``flag`` given in ``argv`` (:func:`typed_spelling`), or None."""
    return typed_spelling((n for decl in flag.names for n in decl.split("/")), argv)


def name_flag(err: TidalError, names: dict[str, str], prefix: str = "") -> TidalError:
    """``err`` with the flags that set its config keys named (``key (--flag): …``), when it is
    a :class:`ConfigError` of a key in ``names`` (:meth:`FlagTable.key_names`), or a config's
    validation error whose lines start with such keys (``prefix`` + key: ``tidal plan``'s
    ``base.`` keys are the simulation config's)."""
    if not isinstance(err, ConfigError):
        return err
    if err.field in names:
        return TidalError(f"{err.field} ({names[err.field]}): {str(err)[len(err.field) + 2 :]}")
    lines = str(err).split("\n")
    out = [lines[0]]
    for line in lines[1:]:
        m = re.match(r"([\w.]+): ", line)
        flag = names.get(prefix + m[1]) if m else None
        out.append(f"{m[1]} ({flag}): {line[m.end() :]}" if m and flag else line)
    return TidalError("\n".join(out)) if out != lines else err


def set_dotted(d: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    for k in keys[:-1]:
        d = d.setdefault(k, {})
    d[keys[-1]] = value


class FlagTable:
    """An ordered table of flags, shared by the commands that take them."""

    def __init__(self, *groups: Iterable[Flag]) -> None:
        self.flags = tuple(f for g in groups for f in g)
        names = [f.name for f in self.flags]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"flags given twice: {sorted(dup)}")

    def __iter__(self) -> Any:
        return iter(self.flags)

    def __getitem__(self, name: str) -> Flag:
        return next(f for f in self.flags if f.name == name)

    def key_names(self, argv: Sequence[str] = ()) -> dict[str, str]:
        """Config key → the flags that set it (``--a or --b``), for error messages; a flag
        given in ``argv`` (the command line) is named as typed there (``-tp``, not ``--tp``)."""
        out: dict[str, str] = {}
        given: set[str] = set()
        for flag in self.flags:
            if flag.key is None:
                continue
            key = f"search.{flag.key}" if flag.axis else flag.key
            typed = typed_name(flag, argv)
            if typed is not None:
                out[key] = typed
                given.add(key)
            elif key not in given:
                name = flag.names[0].split("/")[0]
                out[key] = f"{out[key]} or {name}" if key in out else name
        return out

    def config(self, values: dict[str, Any], argv: Sequence[str] = ()) -> dict[str, Any]:
        """The nested config dict of the flags given (``search`` holds the axes, flat keys); a
        value its ``convert`` refuses is an error naming the key and the flag (as typed in
        ``argv``, the command line)."""
        out: dict[str, Any] = {}
        given: dict[str, Flag] = {}
        for flag in self.flags:
            try:
                value = flag.value(values.get(flag.name))
            except TidalError as err:
                name = typed_name(flag, argv) or flag.names[0].split("/")[0]
                why = str(err).split(": ", 1)[-1]
                raise TidalError(f"{flag.key or flag.name} ({name}): {why}") from None
            if value is None or flag.key is None:
                continue
            if flag.key in given:
                first = given[flag.key]
                raise TidalError(
                    f"{flag.key.rsplit('.', 1)[-1]}: give {first.names[0]} or "
                    f"{flag.names[0]}, not both"
                )
            given[flag.key] = flag
            if flag.axis:
                out.setdefault("search", {})[flag.key] = value
            else:
                set_dotted(out, flag.key, value)
        return out

    def options(self, func: Callable[..., None]) -> Callable[..., None]:
        """``func`` with its ``flags`` parameter replaced by one option per flag of the table."""
        sig = inspect.signature(func, eval_str=True)
        params = list(sig.parameters.values())
        at = [p.name for p in params].index("flags")
        mine = {f.name for f in self.flags}

        @functools.wraps(func)
        def command(**kwargs: Any) -> None:
            values = {k: kwargs.pop(k) for k in list(kwargs) if k in mine}
            func(**kwargs, flags=values)

        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]
        new = [*own[:at], *(f.parameter() for f in self.flags), *own[at + 1 :]]
        del command.__wrapped__  # typer reads the signature below, not func's
        command.__dict__["__signature__"] = sig.replace(parameters=new)
        command.__annotations__ = {p.name: p.annotation for p in new} | {"return": None}
        return command
