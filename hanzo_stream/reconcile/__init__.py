"""The reconciler: observe the live cluster, diff it against topics.yaml, apply the plan."""

from .apply import Result, execute, validate
from .observe import ClusterState, CountingAdmin, observe
from .plan import Change, Options, Plan, make_plan

__all__ = ["Change", "ClusterState", "CountingAdmin", "Options", "Plan", "Result", "execute",
           "make_plan", "observe", "validate"]
