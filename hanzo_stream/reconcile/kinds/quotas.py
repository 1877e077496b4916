"""Client quotas of each declared principal's user entity: set and removed to match its
`quotas:`; other users' quotas are left alone unless --allow-delete; client-id and default
entities are never touched. Unreadable quotas refuse a registry that declares some."""

from __future__ import annotations

from ...registry.model import Registry
from ..changes import Change, Diff, SetUserQuotas
from ..observe import ClusterState
from ..options import Options
from . import Computed


def compute(reg: Registry, state: ClusterState, opts: Options) -> Computed:
    declared = {p.name: dict(p.quotas) for p in reg.principals}
    if state.quotas is None:
        if any(declared.values()):
            return Computed(errors=[
                f"{reg.path}: principals[].quotas: the cluster's client quotas could not "
                "be read, so they cannot be compared. Fix: plan as a principal with "
                "DESCRIBE_CONFIGS on the cluster (admin; registry-planner has it once "
                "an apply has granted it)"])
        return Computed()
    changes: list[Change] = []
    for user, want in sorted(declared.items()):
        have = state.quotas.get(user, {})
        diff = {k: Diff(have.get(k), want.get(k)) for k in sorted(set(want) | set(have))
                if have.get(k) != want.get(k)}
        if diff:
            changes.append(SetUserQuotas(user, diff))
    others = sorted(u for u in state.quotas if u not in declared)
    notes = []
    if others and opts.allow_delete:
        changes.extend(SetUserQuotas(u, {k: Diff(v, None) for k, v in sorted(state.quotas[u].items())})
                       for u in others)
    elif others:
        notes.append(f"client quotas of {len(others)} user(s) not in the registry left alone "
                     f"(delete with --allow-delete): {', '.join(others[:10])}")
    return Computed(changes, notes=notes)
