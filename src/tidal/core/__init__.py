"""Core entities shared by every layer: requests, KV blocks, clocks, registries, metrics."""
