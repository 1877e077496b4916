"""The diff engine: registry + observed cluster -> a plan. Pure: no I/O, property-tested.

Ownership rules (docs/reconciler.md):
- topics: the registry's topics are created and grown; others are left alone unless
  --allow-delete, capped by --max-deletions; internal topics (_*) are never touched;
- configs: only the keys a topic declares (Topic.managed_configs) are compared, by
  effective value, so broker defaults never show as diffs and other keys are never reset;
- ACLs: compared as sets for the principals the registry declares; other principals'
  ACLs are left alone unless --allow-delete;
- SCRAM users: created when missing; passwords are rotated only with --rotate-passwords.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ..registry.model import Acl, Registry
from .observe import ClusterState, is_internal

SCRAM_MECHANISM = "SCRAM-SHA-512"


@dataclass(frozen=True)
class Change:
    """One mutation. `kind` orders and batches them; `detail` is JSON-ready."""

    kind: str  # topic.create | topic.partitions | topic.config | acl.create | acl.delete |
    #            scram.create | scram.rotate | topic.delete
    target: str
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def symbol(self) -> str:
        return {"create": "+", "delete": "-"}.get(self.kind.split(".")[1], "~")

    def describe(self) -> str:
        d = self.detail
        match self.kind:
            case "topic.create":
                cfg = ", ".join(f"{k}={v}" for k, v in d["configs"].items())
                rf = d["replication_factor"] if d["replication_factor"] > 0 else "default"
                return f"topic {self.target}: {d['partitions']} partitions, RF {rf}, {cfg}"
            case "topic.partitions":
                return f"topic {self.target}: partitions {d['from']} -> {d['to']}"
            case "topic.config":
                return f"topic {self.target}: " + ", ".join(
                    f"{k}: {v['from']} -> {v['to']}" for k, v in d["set"].items())
            case "acl.create" | "acl.delete":
                return str(Acl(**d))
            case "scram.create":
                return f"SCRAM-SHA-512 user {self.target}"
            case "scram.rotate":
                return f"SCRAM-SHA-512 user {self.target}: rotate password"
            case "topic.delete":
                return f"topic {self.target} (not in the registry; {d['partitions']} partitions)"
        return f"{self.kind} {self.target}"


ORDER = ("topic.create", "topic.partitions", "topic.config", "acl.create", "acl.delete",
         "scram.create", "scram.rotate", "topic.delete")


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

    def by_kind(self, kind: str) -> list[Change]:
        return [c for c in self.changes if c.kind == kind]

    def to_json(self) -> str:
        return json.dumps({"format": "hanzo-stream-plan/1", "registry": self.registry,
                           "fingerprint": self.fingerprint, "exit_code": self.exit_code,
                           "changes": [asdict(c) for c in self.changes],
                           "errors": self.errors, "notes": self.notes}, indent=2)

    @staticmethod
    def from_json(text: str) -> Plan:
        doc = json.loads(text)
        if doc.get("format") != "hanzo-stream-plan/1":
            raise ValueError("not a hanzo-stream plan file (format hanzo-stream-plan/1)")
        return Plan([Change(**c) for c in doc["changes"]], doc["errors"], doc["notes"],
                    doc["fingerprint"], doc.get("registry", ""))


@dataclass(frozen=True)
class Options:
    allow_delete: bool = False
    max_deletions: int = 0
    rotate_passwords: bool = False
    available_passwords: frozenset[str] = frozenset()  # principals with a password at hand


def make_plan(reg: Registry, state: ClusterState, opts: Options = Options()) -> Plan:
    changes: list[Change] = []
    errors: list[str] = []
    notes: list[str] = []
    f = reg.path

    for t in reg.topics:
        live = state.topics.get(t.name)
        desired_cfg = t.managed_configs()
        if live is None:
            changes.append(Change("topic.create", t.name, {
                "partitions": t.partitions, "replication_factor": t.replication_factor or -1,
                "configs": desired_cfg}))
            continue
        if t.partitions < live.partitions:
            errors.append(
                f"{f}: topics[{t.name}].partitions: {t.partitions} is below the live "
                f"{live.partitions}; Kafka cannot remove partitions (keys would move). "
                f"Fix: set partitions: {live.partitions} (or more)")
        elif t.partitions > live.partitions:
            changes.append(Change("topic.partitions", t.name,
                                  {"from": live.partitions, "to": t.partitions}))
        if t.replication_factor and t.replication_factor != live.replication_factor:
            errors.append(
                f"{f}: topics[{t.name}].replication_factor: {t.replication_factor} differs from "
                f"the live {live.replication_factor}; changing it needs a throttled partition "
                f"reassignment, which the reconciler does not do. Fix: set "
                f"replication_factor: {live.replication_factor} and follow "
                f"docs/runbooks/replication-factor.md")
        drift = {k: {"from": live.configs.get(k), "to": v}
                 for k, v in desired_cfg.items() if live.configs.get(k) != v}
        if drift:
            changes.append(Change("topic.config", t.name, {"set": drift}))

    declared = {t.name for t in reg.topics}
    strays = sorted(n for n in state.topics if n not in declared and not is_internal(n))
    if strays and not opts.allow_delete:
        notes.append(f"{len(strays)} topic(s) not in the registry left alone "
                     f"(delete with --allow-delete): {', '.join(strays[:10])}"
                     + (" ..." if len(strays) > 10 else ""))

    desired_acls = reg.acls()
    owned = reg.owned_principals()
    for acl in sorted(desired_acls - state.acls):
        changes.append(Change("acl.create", acl.principal, asdict(acl)))
    unowned_extra = []
    for acl in sorted(state.acls - desired_acls):
        if acl.principal in owned:
            changes.append(Change("acl.delete", acl.principal, asdict(acl)))
        elif acl.principal.startswith("User:"):
            unowned_extra.append(acl)
    if unowned_extra:
        if opts.allow_delete:
            changes.extend(Change("acl.delete", a.principal, asdict(a)) for a in unowned_extra)
        else:
            who = sorted({a.principal for a in unowned_extra})
            notes.append(f"{len(unowned_extra)} ACL(s) of principals not in the registry left "
                         f"alone (delete with --allow-delete): {', '.join(who[:10])}")

    missing = []
    for p in sorted(reg.principal_names()):
        has = SCRAM_MECHANISM in state.scram_users.get(p, frozenset())
        if not has or opts.rotate_passwords:
            changes.append(Change("scram.rotate" if has else "scram.create", p, {}))
            if p not in opts.available_passwords:
                missing.append(p)
    if missing:
        notes.append(f"no password at hand for SCRAM user(s) {', '.join(missing)}: apply needs "
                     "HANZO_STREAM_PASSWORD_<NAME> (e.g. "
                     f"HANZO_STREAM_PASSWORD_{missing[0].upper().replace('-', '_')}) or "
                     "--secrets-file")

    if opts.allow_delete:
        deletions = [n for n in strays]
        if len(deletions) > opts.max_deletions:
            errors.append(
                f"{len(deletions)} topic deletion(s) exceed --max-deletions "
                f"{opts.max_deletions}: {', '.join(deletions[:10])}. Fix: raise "
                "--max-deletions deliberately, or add the topics back to the registry")
        else:
            changes.extend(Change("topic.delete", n, {"partitions": state.topics[n].partitions})
                           for n in deletions)

    changes.sort(key=lambda c: (ORDER.index(c.kind), c.target, json.dumps(c.detail, sort_keys=True)))
    return Plan(changes, errors, notes, state.fingerprint(), reg.path)
