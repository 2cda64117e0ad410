"""A name → factory registry, so every policy is selected by a short lower-case string."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from tidal.core.errors import unknown_name

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to classes or factories. ``get`` of an unknown name lists the valid ones."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
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
