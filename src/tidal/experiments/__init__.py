"""Experiments built from many runs: parameter sweeps, the capacity planner, and the fidelity
comparison of the simulator with the real engine.

Layer: above the simulator backend (``tidal.sim``), below the command line. Nothing here knows
a policy by name: search spaces come from the policy registries and from dotted config keys, so a
policy registered by another package is one value in a grid away.
"""
