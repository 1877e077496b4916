"""Replication-factor increases, worked out without I/O: where the new replicas go, what they
copy, how it is throttled, and when min.insync.replicas may rise. Property-tested.

The safety rules (docs/reconciler.md#replication-factor):
- min ISR is never above max(1, RF - 1) (broker_config.Replication.min_isr_for): a topic
  keeps taking acks=all writes with one broker down;
- while a topic gains replicas, its min ISR stays at what the replicas it already has allow;
  it rises to the profile's value only once every new replica is in sync. Raised earlier,
  acks=all producers get NOT_ENOUGH_REPLICAS for as long as the copy takes;
- a decrease is refused at plan time (dropping copies of acknowledged data is never what a
  one-line registry edit should do), and so is a factor above the number of brokers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from .changes import Diff, Move

TP = tuple[str, int]

#: Replication throttle while a move runs (bytes/s per broker, each direction): what
#: kafka-reassign-partitions users commonly start with; `--throttle` changes it.
DEFAULT_THROTTLE = 50_000_000

LEADER_THROTTLE = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLE = "follower.replication.throttled.replicas"
TOPIC_THROTTLES = (LEADER_THROTTLE, FOLLOWER_THROTTLE)
BROKER_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


def place(brokers: Sequence[int], assignments: Mapping[TP, tuple[int, ...]],
          targets: Mapping[str, int]) -> dict[TP, tuple[int, ...]]:
    """New replica lists for every partition of a topic in `targets` holding fewer replicas.

    `assignments` is every partition of the cluster (its replicas, preferred leader first), so
    the counts below see the whole cluster. Existing replicas stay; each new one goes to the
    broker holding the fewest replicas (then leading the fewest partitions, then the lowest
    id); the preferred leader becomes the replica leading the fewest partitions, keeping the
    current one on a tie, so leadership spreads over the new brokers after the move. Partitions
    are handled in (topic, partition) order: the same input always gives the same plan.
    """
    replicas_on = Counter({b: 0 for b in brokers})
    leaders_on = Counter({b: 0 for b in brokers})
    for reps in assignments.values():
        replicas_on.update(reps)
        if reps:
            leaders_on[reps[0]] += 1
    out: dict[TP, tuple[int, ...]] = {}
    for tp in sorted(assignments):
        current = assignments[tp]
        want = targets.get(tp[0], 0)
        if len(current) >= want:
            continue
        free = sorted((b for b in brokers if b not in current),
                      key=lambda b: (replicas_on[b], leaders_on[b], b))
        added = tuple(free[:want - len(current)])
        replicas_on.update(added)
        grown = current + added
        old_leader = current[0] if current else None

        def leads_without_this(b: int, old_leader: int | None = old_leader) -> int:
            return leaders_on[b] - (b == old_leader)

        leader = min(grown, key=lambda b: (leads_without_this(b), b != old_leader, b))
        if leader != old_leader:
            if old_leader is not None:
                leaders_on[old_leader] -= 1
            leaders_on[leader] += 1
        out[tp] = (leader, *(b for b in grown if b != leader))
    return out


def moves(settled: Mapping[int, tuple[int, ...]], targets: Mapping[int, tuple[int, ...]],
          sizes: Mapping[int, int], running: Iterable[int] = ()) -> tuple[Move, ...]:
    """One Move per partition whose target differs from what it holds, with the bytes its new
    replicas copy (the partition's size on disk times the number of new replicas)."""
    running = set(running)
    out = []
    for p in sorted(targets):
        before, after = settled[p], targets[p]
        if set(after) == set(before):
            continue
        new = [b for b in after if b not in before]
        out.append(Move(p, Diff(before, after), sizes.get(p, 0) * len(new), p in running))
    return tuple(out)


def throttle_configs(moves_: Iterable[Move]) -> dict[str, str]:
    """The topic configs that throttle exactly the replicas a move touches, as
    kafka-reassign-partitions sets them: the existing replicas on the leader side (they serve
    the copy), the new ones on the follower side (they fetch it)."""
    leader, follower = [], []
    for m in moves_:
        leader += [f"{m.partition}:{b}" for b in m.replicas.before or ()]
        follower += [f"{m.partition}:{b}" for b in m.new_replicas]
    return {LEADER_THROTTLE: ",".join(leader), FOLLOWER_THROTTLE: ",".join(follower)}


def estimate_seconds(moves_: Iterable[Move], throttle: int) -> float:
    """How long the copy takes at the throttle: the busiest broker's bytes in or out over the
    rate (each partition is served by its current preferred leader)."""
    out, into = Counter[int](), Counter[int]()
    for m in moves_:
        new = m.new_replicas
        if not new or not m.replicas.before:
            continue
        out[m.replicas.before[0]] += m.bytes
        for b in new:
            into[b] += m.bytes // len(new)
    busiest = max([*out.values(), *into.values(), 0])
    return busiest / throttle if throttle > 0 else 0.0


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"

