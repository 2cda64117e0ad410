"""Placement and scaling policies (registry ``placement``): each a small class, so a baseline and
WarmServe differ by one name. Importing this package registers all of them."""

from tidal.cluster.policies import dedicated, muxserve, serverlessllm, warmserve  # noqa: F401
from tidal.cluster.policies.base import PLACEMENTS, ClusterPolicy

__all__ = ["PLACEMENTS", "ClusterPolicy"]
