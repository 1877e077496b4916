"""The reconciler: observe the live cluster, diff it against topics.yaml, apply the plan.

`run.plan` and `run.reconcile` are the entry points every caller uses."""

from .admin import CountingAdmin
from .apply import Progress, Result, execute, validate
from .changes import Change, Diff, Move
from .observe import ClusterState, observe
from .plan import Options, Plan, make_plan
from .run import plan, reconcile

__all__ = ["Change", "ClusterState", "CountingAdmin", "Diff", "Move", "Options", "Plan", "Progress",
           "Result", "execute", "make_plan", "observe", "plan", "reconcile", "validate"]
