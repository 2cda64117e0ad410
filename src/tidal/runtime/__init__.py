"""The real backend: a PyTorch Llama model runner behind the engine's executor protocol.

Needs the ``engine`` extra (``pip install 'tidal[engine]'``); nothing below ``tidal.runtime``
imports torch, so the simulator runs without it.
"""
