"""SCRAM users: created when missing; passwords rotated only with --rotate-passwords, and none
of it with --no-scram-users (the in-cluster reconciler Job is then their one writer)."""

from __future__ import annotations

from ...registry.model import Registry
from ..changes import Change, CreateScramUser, RotateScramPassword
from ..observe import ClusterState
from ..options import Options
from . import Computed

SCRAM_MECHANISM = "SCRAM-SHA-512"


def compute(reg: Registry, state: ClusterState, opts: Options) -> Computed:
    principals = sorted(reg.principal_names())
    absent = {p for p in principals if SCRAM_MECHANISM not in state.scram_users.get(p, frozenset())}
    changes: list[Change] = []
    missing = []
    for p in principals if opts.scram_users else ():
        if p in absent or opts.rotate_passwords:
            changes.append(CreateScramUser(p) if p in absent else RotateScramPassword(p))
            if p not in opts.available_passwords:
                missing.append(p)
    notes = []
    if not opts.scram_users:
        notes.append("SCRAM users are left to the in-cluster reconciler Job (--no-scram-users)"
                     + (f"; without one yet: {', '.join(sorted(absent))} (their login works after "
                        "the next `pulumi up`)" if absent else ""))
    if missing:
        notes.append(f"no password at hand for SCRAM user(s) {', '.join(missing)}: apply needs "
                     "HANZO_STREAM_PASSWORD_<NAME> (e.g. "
                     f"HANZO_STREAM_PASSWORD_{missing[0].upper().replace('-', '_')}) or "
                     "--secrets-file")
    return Computed(changes, notes=notes)
