"""What a plan may do beyond the registry's word: the CLI's flags, read by every change computer."""

from __future__ import annotations

from dataclasses import dataclass

from .replication import DEFAULT_THROTTLE


@dataclass(frozen=True)
class Options:
    allow_delete: bool = False
    max_deletions: int = 0
    rotate_passwords: bool = False
    available_passwords: frozenset[str] = frozenset()  # principals with a password at hand
    throttle: int = DEFAULT_THROTTLE  # bytes/s per broker while replicas copy
    # False: SCRAM users are another writer's (the in-cluster reconciler Job, which holds the
    # Pulumi passwords); the plan neither creates nor rotates one, so passwords have one writer.
    scram_users: bool = True
