"""ACLs: compared as sets for the principals the registry declares; other principals' ACLs are
left alone (a note lists them) unless --allow-delete."""

from __future__ import annotations

from ...registry.model import Registry
from ..changes import Change, CreateAcl, DeleteAcl
from ..observe import ClusterState
from ..options import Options
from . import Computed


def compute(reg: Registry, state: ClusterState, opts: Options) -> Computed:
    desired = reg.acls()
    owned = reg.owned_principals()
    changes: list[Change] = [CreateAcl(acl) for acl in sorted(desired - state.acls)]
    unowned_extra = []
    for acl in sorted(state.acls - desired):
        if acl.principal in owned:
            changes.append(DeleteAcl(acl))
        elif acl.principal.startswith("User:"):
            unowned_extra.append(acl)
    notes = []
    if unowned_extra:
        if opts.allow_delete:
            changes.extend(DeleteAcl(a) for a in unowned_extra)
        else:
            who = sorted({a.principal for a in unowned_extra})
            notes.append(f"{len(unowned_extra)} ACL(s) of principals not in the registry left "
                         f"alone (delete with --allow-delete): {', '.join(who[:10])}")
    return Computed(changes, notes=notes)
