"""Every policy registry complete: importing this module imports each package that registers
policies by name, so that a lookup by name (a config's ``scheduler.batching``, ``--placement``,
the CLI's help) sees all of them.

The registries live low (:data:`tidal.engine.policy.BATCHING`,
:data:`tidal.engine.ordering.ORDERINGS`, :data:`tidal.cluster.policies.PLACEMENTS`, the
augmentation registries of :mod:`tidal.augment`), the papers' policies above them
(:mod:`tidal.batching`, :mod:`tidal.augment`, :mod:`tidal.cluster.policies`); this is the lowest
layer that sees all of them, so the completion point is here and every caller that looks a policy
up by name (sim, runtime, experiments, cli) imports it. A policy in a file outside the package is
added with ``--policy-module`` (:func:`tidal.core.plugins.load_policy_modules`).
"""

import tidal.augment.bundles
import tidal.batching.eb
import tidal.batching.ebplus
import tidal.cluster.policies
import tidal.engine.build  # noqa: F401  (mb, prefill-first: the engine's own policies)

__all__: list[str] = []
