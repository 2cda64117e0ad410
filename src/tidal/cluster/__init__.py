"""The cluster layer: GPUs, memory pages, weight transfers, model instances and the policies that
place, prewarm and scale them (WarmServe and its baselines). It sits between the engine and the
backends and never imports a backend: a backend implements :class:`tidal.cluster.backend.Backend`.
"""
