"""One change computer per kind of object the reconciler owns (Jikkou's TopicChangeComputer is
the model): each reads the registry and the observed cluster and returns its own changes,
errors and notes. `plan.make_plan` joins them; none of them sees another's lists.

- replication_factor: RaiseReplication, ClearThrottle, and the refused factors;
- topics: CreateTopic, AddPartitions, AlterTopicConfigs, and the refused partition counts;
- acls: CreateAcl, DeleteAcl;
- scram: CreateScramUser, RotateScramPassword;
- quotas: SetUserQuotas;
- deletions: DeleteTopic, capped by --max-deletions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..changes import Change


@dataclass(frozen=True)
class Computed:
    """One kind's share of a plan."""

    changes: list[Change] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
