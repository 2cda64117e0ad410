"""Tidal: LLM serving with one policy core, an exact fast simulator and a real engine."""

__version__ = "0.1.0"
