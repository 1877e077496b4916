"""The diff engine: registry + observed cluster -> a plan. Pure: no I/O, property-tested.

Ownership rules (docs/reconciler.md):
- topics: the registry's topics are created and grown; others are left alone unless
  --allow-delete, capped by --max-deletions; internal topics (_*) are never touched;
- configs: only the keys a topic declares (Topic.managed_configs) are compared, by
  effective value, so broker defaults never show as diffs and other keys are never reset;
- ACLs: compared as sets for the principals the registry declares; other principals'
  ACLs are left alone unless --allow-delete;
- SCRAM users: created when missing; passwords are rotated only with --rotate-passwords;
- client quotas: of each declared principal's user entity, set and removed to match its
  `quotas:`; other users' quotas are left alone unless --allow-delete; client-id and default
  entities are never touched;
- replication: a topic's factor (its own, or the registry's profile) only grows, as a throttled
  reassignment (replication.py); min.insync.replicas follows it, rising only after the move.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TypeVar

from ..broker_config import PROFILES, Replication
from ..registry.model import Registry
from . import replication
from .changes import (
    ORDER,
    AddPartitions,
    AlterTopicConfigs,
    Change,
    ClearThrottle,
    CreateAcl,
    CreateScramUser,
    CreateTopic,
    DeleteAcl,
    DeleteTopic,
    Diff,
    RaiseReplication,
    RotateScramPassword,
    SetUserQuotas,
    from_dict,
)
from .observe import KAFKA_OWN_REPLICATED, ClusterState, TopicState, is_internal

SCRAM_MECHANISM = "SCRAM-SHA-512"
FORMAT = "hanzo-stream-plan/2"  # /1 had untyped `detail` dicts; changes now carry before/after
MIN_ISR = "min.insync.replicas"
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


@dataclass(frozen=True)
class Options:
    allow_delete: bool = False
    max_deletions: int = 0
    rotate_passwords: bool = False
    available_passwords: frozenset[str] = frozenset()  # principals with a password at hand
    throttle: int = replication.DEFAULT_THROTTLE  # bytes/s per broker while replicas copy
    # False: SCRAM users are another writer's (the in-cluster reconciler Job, which holds the
    # Pulumi passwords); the plan neither creates nor rotates one, so passwords have one writer.
    scram_users: bool = True


def profile_of(reg: Registry, state: ClusterState) -> Replication:
    """The replication profile in force: the registry's, or the one for the cluster's size
    (ClusterState.size: brokers restarting in a roll count)."""
    if reg.replication_profile and reg.replication_profile != "cluster":
        return PROFILES[reg.replication_profile]
    return Replication.for_cluster(state.size)


def desired_replication(reg: Registry, state: ClusterState) -> dict[str, tuple[int, int]]:
    """topic -> (replication factor, min ISR), for each registry topic whose replication is
    managed: it states its own factor, or the registry names a profile. With a profile,
    Kafka's own topics (KAFKA_OWN_REPLICATED) are in it when they are below its factor."""
    profile = profile_of(reg, state)
    out = {}
    for t in reg.topics:
        rf = t.replication_factor or (
            profile.default_replication_factor if reg.replication_profile else None)
        if rf:
            out[t.name] = (rf, profile.min_isr_for(rf))
    rf = profile.default_replication_factor
    for name in KAFKA_OWN_REPLICATED if reg.replication_profile else ():
        live = state.topics.get(name)
        if live and live.replication_factor < rf <= len(state.brokers):
            out[name] = (rf, profile.min_isr_for(rf))
    return out


def topics_to_grow(reg: Registry, state: ClusterState) -> set[str]:
    """Live topics whose replication factor the registry raises (their sizes make the plan)."""
    return {n for n, (rf, _) in desired_replication(reg, state).items()
            if n in state.topics and rf > state.topics[n].replication_factor}


def watched_configs(reg: Registry) -> frozenset[str]:
    """Every topic config a plan reads: the registry's managed keys, min ISR (the replication
    profile's) and the move's throttles. observe() asks for these alone, and the state's
    fingerprint covers them alone, so a key no plan reads never invalidates a saved plan."""
    return frozenset({MIN_ISR, *replication.TOPIC_THROTTLES,
                      *(k for t in reg.topics for k in t.managed_configs())})


def make_plan(reg: Registry, state: ClusterState, opts: Options = Options()) -> Plan:
    changes: list[Change] = []
    errors: list[str] = []
    notes: list[str] = []
    f = reg.path
    want = desired_replication(reg, state)
    growing = _check_replication(reg, state, want, errors)
    placed = (replication.place(state.brokers, _everywhere(state), growing, state.racks)
              if growing else {})

    for t in reg.topics:
        live = state.topics.get(t.name)
        desired_cfg = t.managed_configs()
        if t.name in want:
            desired_cfg[MIN_ISR] = str(want[t.name][1])
        if live is None:
            rf = want[t.name][0] if t.name in want else None
            changes.append(CreateTopic(t.name, Diff(None, t.partitions), Diff(None, rf),
                                       {k: Diff(None, v) for k, v in desired_cfg.items()}))
            continue
        if t.partitions < live.partitions:
            errors.append(
                f"{f}: topics[{t.name}].partitions: {t.partitions} is below the live "
                f"{live.partitions}; Kafka cannot remove partitions (keys would move). "
                f"Fix: set partitions: {live.partitions} (or more)")
        elif t.partitions > live.partitions:
            changes.append(AddPartitions(t.name, Diff(live.partitions, t.partitions),
                                         _new_replicas(t.name, live.partitions, t.partitions,
                                                       want.get(t.name), state)))
        if t.name in growing:
            changes.append(_raise(live, want[t.name], profile_of(reg, state), placed, opts))
            desired_cfg.pop(MIN_ISR)  # the move owns it: lowered before, raised after
        elif throttled := _leftover_throttle(live):
            changes.append(throttled)
        drift = {k: Diff(live.configs.get(k), v)
                 for k, v in desired_cfg.items() if live.configs.get(k) != v}
        if drift:
            changes.append(AlterTopicConfigs(t.name, drift))

    for name in sorted(set(growing) - {t.name for t in reg.topics}):  # Kafka's own topics
        changes.append(_raise(state.topics[name], want[name], profile_of(reg, state), placed, opts))
    for name in KAFKA_OWN_REPLICATED:  # an interrupted move of theirs leaves a throttle behind
        live = state.topics.get(name)
        if live and name not in growing and (throttled := _leftover_throttle(live)):
            changes.append(throttled)

    declared = {t.name for t in reg.topics}
    strays = sorted(n for n in state.topics if n not in declared and not is_internal(n))
    if strays and not opts.allow_delete:
        notes.append(f"{len(strays)} topic(s) not in the registry left alone "
                     f"(delete with --allow-delete): {', '.join(strays[:10])}"
                     + (" ..." if len(strays) > 10 else ""))

    desired_acls = reg.acls()
    owned = reg.owned_principals()
    changes.extend(CreateAcl(acl) for acl in sorted(desired_acls - state.acls))
    unowned_extra = []
    for acl in sorted(state.acls - desired_acls):
        if acl.principal in owned:
            changes.append(DeleteAcl(acl))
        elif acl.principal.startswith("User:"):
            unowned_extra.append(acl)
    if unowned_extra:
        if opts.allow_delete:
            changes.extend(DeleteAcl(a) for a in unowned_extra)
        else:
            who = sorted({a.principal for a in unowned_extra})
            notes.append(f"{len(unowned_extra)} ACL(s) of principals not in the registry left "
                         f"alone (delete with --allow-delete): {', '.join(who[:10])}")

    principals = sorted(reg.principal_names())
    absent = {p for p in principals if SCRAM_MECHANISM not in state.scram_users.get(p, frozenset())}
    missing = []
    for p in principals if opts.scram_users else ():
        if p in absent or opts.rotate_passwords:
            changes.append(CreateScramUser(p) if p in absent else RotateScramPassword(p))
            if p not in opts.available_passwords:
                missing.append(p)
    if not opts.scram_users:
        notes.append("SCRAM users are left to the in-cluster reconciler Job (--no-scram-users)"
                     + (f"; without one yet: {', '.join(sorted(absent))} (their login works after "
                        "the next `pulumi up`)" if absent else ""))
    if missing:
        notes.append(f"no password at hand for SCRAM user(s) {', '.join(missing)}: apply needs "
                     "HANZO_STREAM_PASSWORD_<NAME> (e.g. "
                     f"HANZO_STREAM_PASSWORD_{missing[0].upper().replace('-', '_')}) or "
                     "--secrets-file")

    _plan_quotas(reg, state, opts, changes, errors, notes)
    if reg.legacy:  # a takeover's transition window: every plan says it is open (registry.md)
        notes.append(f"legacy_plaintext: anonymous PLAINTEXT clients stand in for "
                     f"{', '.join(reg.legacy.stands_in_for)} until {reg.legacy.until}; move them "
                     "to their principals, then remove the block (docs/takeover.md)")

    if opts.allow_delete:
        if len(strays) > opts.max_deletions:
            errors.append(
                f"{len(strays)} topic deletion(s) exceed --max-deletions "
                f"{opts.max_deletions}: {', '.join(strays[:10])}. Fix: raise "
                "--max-deletions deliberately, or add the topics back to the registry")
        else:
            changes.extend(DeleteTopic(n, state.topics[n].partitions) for n in strays)

    changes.sort(key=lambda c: (ORDER.index(c.KIND), c.target,
                                json.dumps(c.to_dict(), sort_keys=True)))
    return Plan(changes, errors, notes, state.fingerprint(), reg.path)


def _plan_quotas(reg: Registry, state: ClusterState, opts: Options, changes: list[Change],
                 errors: list[str], notes: list[str]) -> None:
    declared = {p.name: dict(p.quotas) for p in reg.principals}
    if state.quotas is None:
        if any(declared.values()):
            errors.append(f"{reg.path}: principals[].quotas: the cluster's client quotas could not "
                          "be read, so they cannot be compared. Fix: plan as a principal with "
                          "DESCRIBE_CONFIGS on the cluster (admin; registry-planner has it once "
                          "an apply has granted it)")
        return
    for user, want in sorted(declared.items()):
        have = state.quotas.get(user, {})
        diff = {k: Diff(have.get(k), want.get(k)) for k in sorted(set(want) | set(have))
                if have.get(k) != want.get(k)}
        if diff:
            changes.append(SetUserQuotas(user, diff))
    others = sorted(u for u in state.quotas if u not in declared)
    if others and opts.allow_delete:
        changes.extend(SetUserQuotas(u, {k: Diff(v, None) for k, v in sorted(state.quotas[u].items())})
                       for u in others)
    elif others:
        notes.append(f"client quotas of {len(others)} user(s) not in the registry left alone "
                     f"(delete with --allow-delete): {', '.join(others[:10])}")


def _check_replication(reg: Registry, state: ClusterState, want: dict[str, tuple[int, int]],
                       errors: list[str]) -> dict[str, int]:
    """The topics whose factor may grow now (topic -> target); refusals go to `errors`."""
    f = reg.path
    growing = {}
    for name, (rf, _) in sorted(want.items()):
        live = state.topics.get(name)
        own = next((t.replication_factor for t in reg.topics if t.name == name), None)
        where = (f"{f}: topics[{name}].replication_factor" if own
                 else f"{f}: replication.profile ({reg.replication_profile}) for topic {name}")
        if live is None:
            if state.brokers and rf > len(state.brokers):
                errors.append(f"{where}: {rf} replicas need {rf} brokers; the cluster has "
                              f"{len(state.brokers)}. Fix: add brokers first (docs/runbooks/"
                              "scaling-1-to-3.md), or lower the replication factor")
            continue
        foreign = sorted(p for p in live.moving if len(live.target(p)) != rf)
        if rf < live.replication_factor:
            errors.append(
                f"{where}: {rf} is below the live {live.replication_factor}; the reconciler "
                "never removes replicas (each one is a copy of acknowledged data, and a "
                "one-line registry edit should not drop it). Fix: set replication_factor: "
                f"{live.replication_factor} (or the profile that gives it); to really lower "
                "it, reassign by hand (docs/reconciler.md#replication-factor)")
        elif rf > live.replication_factor and rf > len(state.brokers):  # a raise needs them live
            errors.append(f"{where}: {rf} replicas need {rf} brokers; the cluster has "
                          f"{len(state.brokers)}. Fix: add brokers first (docs/runbooks/"
                          "scaling-1-to-3.md), or lower the replication factor")
        elif foreign:
            errors.append(
                f"{where}: partition(s) {', '.join(map(str, foreign))} of {name} are being "
                "reassigned to another replica count by someone else. Fix: wait for that "
                "reassignment to finish, or cancel it (kafka-reassign-partitions --cancel)")
        elif rf > live.replication_factor:
            growing[name] = rf
    return growing


def _leftover_throttle(live: TopicState) -> ClearThrottle | None:
    """The throttle an interrupted move left on a topic no move owns now, to be cleared."""
    left = {k: Diff(live.configs.get(k), None) for k in replication.TOPIC_THROTTLES
            if k in live.dynamic}
    return ClearThrottle(live.name, left) if left else None


def _everywhere(state: ClusterState) -> dict[tuple[str, int], tuple[int, ...]]:
    """Every partition's replicas once running moves end: what placement balances against."""
    return {(n, p): t.target(p) for n, t in state.topics.items() for p in range(t.partitions)}


def _new_replicas(topic: str, have: int, total: int, want: tuple[int, int] | None,
                  state: ClusterState) -> tuple[tuple[int, ...], ...]:
    """Where new partitions go when the topic's factor is managed: placed like a move, at the
    factor the registry wants (so they need no move later). () leaves it to the brokers."""
    if not want or not state.brokers or want[0] > len(state.brokers):
        return ()
    new = {(topic, p): () for p in range(have, total)}
    placed = replication.place(state.brokers, _everywhere(state) | new, {topic: want[0]}, state.racks)
    return tuple(placed[(topic, p)] for p in range(have, total))


def _raise(live: TopicState, want: tuple[int, int], profile: Replication,
           placed: dict[tuple[str, int], tuple[int, ...]], opts: Options) -> RaiseReplication:
    rf, isr = want
    targets = {p: placed.get((live.name, p), live.target(p)) for p in range(live.partitions)}
    settled = {p: live.settled(p) for p in range(live.partitions)}
    moves = replication.moves(settled, targets, live.sizes, running=live.moving)
    now = int(live.configs.get(MIN_ISR, "1"))
    safe_now = profile.min_isr_for(live.replication_factor)
    return RaiseReplication(live.name, Diff(live.replication_factor, rf), Diff(now, isr), moves,
                            opts.throttle, safe_now if now > safe_now else None)
