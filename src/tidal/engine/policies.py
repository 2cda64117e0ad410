"""Imports every policy module so that the registries are complete."""

from tidal.engine import eb, ebplus, mb, ordering, prefill_first  # noqa: F401
from tidal.engine.augment import bundles  # noqa: F401
