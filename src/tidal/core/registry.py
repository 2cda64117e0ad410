"""A name → factory registry, so every policy is selected by a short lower-case string.

Every registry has the same options hook: a registered class (or factory) may declare its
pydantic options model in ``Options`` (None or absent: no options) and where a run's config
holds them in ``options_key`` (default ``options``, read under the registry's config
``section``: ``scheduler.options``). The registry validates a config's options against that
model (:meth:`Registry.validate_options`) and describes its entries for the CLI's help
(:meth:`Registry.describe`), so neither a validator nor a help string names a policy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from tidal.core.errors import unknown_name

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to classes or factories. ``get`` of an unknown name lists the valid ones."""

    def __init__(self, kind: str, section: str = "") -> None:
        self.kind = kind
        self.section = section
        """The config section of the registry's selector and options (``scheduler``)."""
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._items[name] = obj
            return obj

        return deco

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise unknown_name(self.kind, name, self._items) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    # ------------------------------------------------------------------ options hook
    def options_model(self, name: str) -> type[BaseModel] | None:
        """The options model entry ``name`` declares (its ``Options``; None: no options)."""
        model = getattr(self.get(name), "Options", None)
        return model if isinstance(model, type) and issubclass(model, BaseModel) else None

    def options_path(self, name: str) -> str:
        """The config key of entry ``name``'s options: ``<section>.<options_key>``."""
        key = getattr(self.get(name), "options_key", "options")
        return f"{self.section}.{key}" if self.section else key

    def validate_options(
        self, name: str, options: Mapping[str, Any], at: str | None = None
    ) -> BaseModel | None:
        """``options`` (the config's ``at``, default ``<section>.options``) validated by entry
        ``name``'s model; None when it has none or reads its options elsewhere. Options given
        to an entry that takes none there raise a ``ValueError`` naming both keys (a pydantic
        validator turns it into a validation error); invalid options, the model's
        ``ValidationError``."""
        at = at or (f"{self.section}.options" if self.section else "options")
        model, path = self.options_model(name), self.options_path(name)
        if model is None or path != at:
            if options:
                elsewhere = f" (its options are {path})" if model is not None else ""
                raise ValueError(f"{at}: {name!r} takes no options there{elsewhere}")
            return None
        return model.model_validate(dict(options))

    def summary(self, name: str) -> str:
        """The first line of entry ``name``'s docstring, without its final period (a class's
        or a function's; an instance, e.g. a bundle of settings, has none of its own)."""
        obj = self.get(name)
        doc = (obj.__doc__ or "").strip() if isinstance(obj, type) or callable(obj) else ""
        return doc.splitlines()[0].rstrip(".") if doc else ""

    def describe(self, summaries: bool = True) -> str:
        """The entries for the CLI's help of the registry's flag: ``name (summary) [options:
        key]`` each, ``; ``-separated; without ``summaries`` (or when no entry has a summary
        or options), ``a | b | c``."""
        if not summaries:
            return " | ".join(self)
        parts = []
        for name in self:
            summary = self.summary(name)
            opts = f" [options: {self.options_path(name)}]" if self.options_model(name) else ""
            parts.append(f"{name} ({summary}){opts}" if summary else f"{name}{opts}")
        return "; ".join(parts) if parts != list(self) else " | ".join(parts)
