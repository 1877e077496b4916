"""The diff engine: registry + observed cluster -> a plan. Pure: no I/O, property-tested.

One change computer per kind (kinds/) works out its changes, errors and notes; make_plan
joins them in a fixed order and sorts the changes into apply's ORDER.

Ownership rules: docs/reconciler.md; each kind's module says its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TypeVar

from ..registry.model import Registry
from . import replication
from .changes import ORDER, Change, from_dict
from .kinds import Computed, acls, deletions, quotas, replication_factor, scram, topics
from .kinds.replication_factor import MIN_ISR, topics_to_grow
from .observe import ClusterState
from .options import Options

__all__ = ["FORMAT", "MIN_ISR", "Options", "Plan", "make_plan", "topics_to_grow", "watched_configs"]

FORMAT = "hanzo-stream-plan/2"  # /1 had untyped `detail` dicts; changes now carry before/after
C = TypeVar("C", bound=Change)


@dataclass
class Plan:
    changes: list[Change]
    errors: list[str]
    notes: list[str]
    fingerprint: str
    registry: str = ""

    @property
    def exit_code(self) -> int:
        """terraform's -detailed-exitcode: 0 nothing to do, 2 changes pending, 1 error."""
        return 1 if self.errors else (2 if self.changes else 0)

    def of(self, cls: type[C]) -> list[C]:
        return [c for c in self.changes if isinstance(c, cls)]

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "registry": self.registry,
                           "fingerprint": self.fingerprint, "exit_code": self.exit_code,
                           "changes": [c.to_dict() for c in self.changes],
                           "errors": self.errors, "notes": self.notes}, indent=2)

    @staticmethod
    def from_json(text: str) -> Plan:
        """A plan `plan --out` saved; ValueError for any other text (a file cut short or
        edited by hand must be refused with a reason, not a traceback)."""
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            got = doc.get("format") if isinstance(doc, dict) else None
            raise ValueError(f"not a plan this hanzo-stream can apply (format {got!r}, "
                             f"expected {FORMAT}): run plan again")
        try:
            return Plan([from_dict(c) for c in doc["changes"]], doc["errors"], doc["notes"],
                        doc["fingerprint"], doc.get("registry", ""))
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"not a plan `plan --out` wrote ({type(e).__name__}: {e}): "
                             "run plan again") from None


def watched_configs(reg: Registry) -> frozenset[str]:
    """Every topic config a plan reads: the registry's managed keys, min ISR (the replication
    profile's) and the move's throttles. observe() asks for these alone, and the state's
    fingerprint covers them alone, so a key no plan reads never invalidates a saved plan."""
    return frozenset({MIN_ISR, *replication.TOPIC_THROTTLES,
                      *(k for t in reg.topics for k in t.managed_configs())})


def make_plan(reg: Registry, state: ClusterState, opts: Options = Options()) -> Plan:
    """Every kind's share, joined. Errors and notes read in this order (replication's refusals
    first: they decide what the topics may do); changes are sorted into apply's ORDER."""
    growth = replication_factor.growth(reg, state)
    parts = [
        replication_factor.compute(reg, state, growth, opts),
        topics.compute(reg, state, growth, opts),
        acls.compute(reg, state, opts),
        scram.compute(reg, state, opts),
        quotas.compute(reg, state, opts),
        _legacy(reg),
        deletions.compute(reg, state, opts),
    ]
    changes = sorted((c for p in parts for c in p.changes),
                     key=lambda c: (ORDER.index(c.KIND), c.target, json.dumps(c.to_dict(), sort_keys=True)))
    return Plan(changes, [e for p in parts for e in p.errors], [n for p in parts for n in p.notes],
                state.fingerprint(), reg.path)


def _legacy(reg: Registry) -> Computed:
    """A takeover's transition window: every plan says it is open (registry.md)."""
    if not reg.legacy:
        return Computed()
    return Computed(notes=[f"legacy_plaintext: anonymous PLAINTEXT clients stand in for "
                           f"{', '.join(reg.legacy.stands_in_for)} until {reg.legacy.until}; move "
                           "them to their principals, then remove the block (docs/takeover.md)"])
