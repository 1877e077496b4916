"""Registry topics: CreateTopic, AddPartitions, AlterTopicConfigs, and an error for a partition
count below the live one. Only the keys a topic declares are compared, by effective value,
so broker defaults never show as diffs and other keys are never reset."""

from __future__ import annotations

from ...registry.model import Registry
from .. import replication
from ..changes import AddPartitions, AlterTopicConfigs, Change, CreateTopic, Diff
from ..observe import ClusterState, is_internal
from ..options import Options
from . import Computed
from .replication_factor import MIN_ISR, Growth, everywhere


def compute(reg: Registry, state: ClusterState, growth: Growth, opts: Options) -> Computed:
    """Topics are created at the factor `growth` wants and grown in place; min ISR is theirs
    to set, except on a growing topic, where the move owns it (lowered before, raised after)."""
    changes: list[Change] = []
    errors: list[str] = []
    want = growth.want
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
                f"{reg.path}: topics[{t.name}].partitions: {t.partitions} is below the live "
                f"{live.partitions}; Kafka cannot remove partitions (keys would move). "
                f"Fix: set partitions: {live.partitions} (or more)")
        elif t.partitions > live.partitions:
            changes.append(AddPartitions(t.name, Diff(live.partitions, t.partitions),
                                         _new_replicas(t.name, live.partitions, t.partitions,
                                                       want.get(t.name), state)))
        if t.name in growth.growing:
            desired_cfg.pop(MIN_ISR)
        drift = {k: Diff(live.configs.get(k), v)
                 for k, v in desired_cfg.items() if live.configs.get(k) != v}
        if drift:
            changes.append(AlterTopicConfigs(t.name, drift))
    notes = []
    if (left := strays(reg, state)) and not opts.allow_delete:
        notes.append(f"{len(left)} topic(s) not in the registry left alone "
                     f"(delete with --allow-delete): {', '.join(left[:10])}"
                     + (" ..." if len(left) > 10 else ""))
    return Computed(changes, errors, notes)


def strays(reg: Registry, state: ClusterState) -> list[str]:
    """Live topics the registry does not declare, internal ones (_*) never among them."""
    declared = {t.name for t in reg.topics}
    return sorted(n for n in state.topics if n not in declared and not is_internal(n))


def _new_replicas(topic: str, have: int, total: int, want: tuple[int, int] | None,
                  state: ClusterState) -> tuple[tuple[int, ...], ...]:
    """Where new partitions go when the topic's factor is managed: placed like a move, at the
    factor the registry wants (so they need no move later). () leaves it to the brokers."""
    if not want or not state.brokers or want[0] > len(state.brokers):
        return ()
    new = {(topic, p): () for p in range(have, total)}
    placed = replication.place(state.brokers, everywhere(state) | new, {topic: want[0]}, state.racks)
    return tuple(placed[(topic, p)] for p in range(have, total))
