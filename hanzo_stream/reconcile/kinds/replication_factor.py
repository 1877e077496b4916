"""Replication factors: RaiseReplication for a factor the registry raises, ClearThrottle for the
throttle an interrupted move left behind, and an error for each factor that may not change now.

A factor only grows, as a throttled reassignment (..replication says where replicas go and
why min.insync.replicas rises only after the move).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...core.broker_config import PROFILES, Replication
from ...registry.model import Registry
from .. import replication
from ..changes import Change, ClearThrottle, Diff, RaiseReplication
from ..observe import KAFKA_OWN_REPLICATED, ClusterState, TopicState
from ..options import Options
from . import Computed

MIN_ISR = "min.insync.replicas"


@dataclass(frozen=True)
class Growth:
    """What the registry asks of replication, worked out once: this kind and topics read it."""

    want: dict[str, tuple[int, int]]  # topic -> (replication factor, min ISR), where managed
    growing: dict[str, int]  # topic -> the factor a move may raise it to now
    errors: list[str]  # the factors refused


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


def growth(reg: Registry, state: ClusterState) -> Growth:
    want = desired_replication(reg, state)
    errors: list[str] = []
    return Growth(want, _check(reg, state, want, errors), errors)


def compute(reg: Registry, state: ClusterState, growth: Growth, opts: Options) -> Computed:
    """A raise for each growing topic, a ClearThrottle for each leftover throttle."""
    growing = growth.growing
    placed = (replication.place(state.brokers, everywhere(state), growing, state.racks)
              if growing else {})
    changes: list[Change] = []

    def raise_(live: TopicState) -> RaiseReplication:
        return _raise(live, growth.want[live.name], profile_of(reg, state), placed, opts)

    for t in reg.topics:
        live = state.topics.get(t.name)
        if live is None:
            continue
        if t.name in growing:
            changes.append(raise_(live))
        elif throttled := _leftover_throttle(live):
            changes.append(throttled)
    for name in sorted(set(growing) - {t.name for t in reg.topics}):  # Kafka's own topics
        changes.append(raise_(state.topics[name]))
    for name in KAFKA_OWN_REPLICATED:  # an interrupted move of theirs leaves a throttle behind
        live = state.topics.get(name)
        if live and name not in growing and (throttled := _leftover_throttle(live)):
            changes.append(throttled)
    return Computed(changes, list(growth.errors))


def _check(reg: Registry, state: ClusterState, want: dict[str, tuple[int, int]],
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


def everywhere(state: ClusterState) -> dict[tuple[str, int], tuple[int, ...]]:
    """Every partition's replicas once running moves end: what placement balances against."""
    return {(n, p): t.target(p) for n, t in state.topics.items() for p in range(t.partitions)}


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
