"""The exclusive-batching family of policies (EB, EB⁺) over the engine core.

``eb`` (:mod:`tidal.batching.eb`: prefill-only and decode-only steps, refilled at a threshold
set by a controller) and ``ebplus`` (:mod:`tidal.batching.ebplus`: the online selector between
EB and the engine's mixed batching), with their options (:mod:`tidal.batching.eb_options`, YAML
``scheduler.eb``), bounds, cost model, theory and the online output-length statistics only they
use. They register in the engine's :data:`~tidal.engine.policy.BATCHING` registry and use only
the engine core's public interface (state, plan, policy), which is why they sit in a package of
their own one layer above ``engine`` (docs/ARCHITECTURE.md)."""
