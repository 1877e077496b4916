"""Topics not in the registry: DeleteTopic, only with --allow-delete, and the whole plan refused
when they exceed --max-deletions. (Without --allow-delete, topics' note lists them.)"""

from __future__ import annotations

from ...registry.model import Registry
from ..changes import DeleteTopic
from ..observe import ClusterState
from ..options import Options
from . import Computed
from .topics import strays


def compute(reg: Registry, state: ClusterState, opts: Options) -> Computed:
    left = strays(reg, state)
    if not opts.allow_delete:
        return Computed()
    if len(left) > opts.max_deletions:
        return Computed(errors=[
            f"{len(left)} topic deletion(s) exceed --max-deletions "
            f"{opts.max_deletions}: {', '.join(left[:10])}. Fix: raise "
            "--max-deletions deliberately, or add the topics back to the registry"])
    return Computed([DeleteTopic(n, state.topics[n].partitions) for n in left])
