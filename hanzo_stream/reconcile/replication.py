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
          targets: Mapping[str, int], racks: Mapping[int, str] | None = None,
          ) -> dict[TP, tuple[int, ...]]:
    """New replica lists for every partition of a topic in `targets` holding fewer replicas.

    `assignments` is every partition of the cluster (its replicas, preferred leader first), so
    the counts see the whole cluster. Existing replicas stay. Each new one first goes to a
    rack the partition has no replica in yet (`racks`: broker -> its broker.rack; a broker
    without one is a rack of its own), as Kafka's own rack-aware assignment does, so losing a
    zone leaves a copy; among those, to the broker holding the fewest replicas (ties: the next
    broker after the partition's leader, as Kafka shifts replicas). Then new replicas move from
    fuller to emptier brokers while a single move helps (no new replica sits on a broker
    holding 2+ more replicas than a broker its partition could use without losing a rack).
    Leaders are balanced among each partition's replicas, within each topic first, then across
    the cluster (_lead). The same input always gives the same plan.
    """
    rack = {b: (racks or {}).get(b) or f"#{b}" for b in brokers}
    order = {b: i for i, b in enumerate(sorted(brokers))}
    load = Counter({b: 0 for b in brokers})
    for reps in assignments.values():
        load.update(reps)
    grown: dict[TP, list[int]] = {}
    for tp in sorted(assignments):
        current = assignments[tp]
        want = targets.get(tp[0], 0)
        if len(current) >= want:
            continue
        start = order[current[0]] if current else tp[1] % max(len(order), 1)
        reps = list(current)
        for _ in range(min(want, len(brokers)) - len(current)):
            used = {rack.get(r) for r in reps}
            b = min((b for b in brokers if b not in reps),
                    key=lambda b, s=start, u=used: (rack[b] in u, load[b], (order[b] - s) % len(order)))
            reps.append(b)
            load[b] += 1
        grown[tp] = reps
    _rebalance(grown, assignments, load, brokers, rack)
    return _lead(grown, assignments)


def _spread(reps: Sequence[int], rack: Mapping[int, str]) -> int:
    return len({rack.get(b, f"#{b}") for b in reps})


def _rebalance(grown: dict[TP, list[int]], assignments: Mapping[TP, tuple[int, ...]],
               load: Counter[int], brokers: Sequence[int], rack: Mapping[int, str]) -> None:
    """Move new replicas from a fuller to an emptier broker while that narrows the gap by
    two or more and keeps the partition in as many racks (each move lowers the sum of squared
    loads, so this ends)."""
    improved = True
    while improved:
        improved = False
        for tp in sorted(grown):
            reps = grown[tp]
            for i in range(len(assignments[tp]), len(reps)):
                b = reps[i]
                spread = _spread(reps, rack)
                c = min((c for c in brokers if c not in reps
                         and _spread([*reps[:i], c, *reps[i + 1:]], rack) >= spread),
                        key=lambda c: (load[c], c), default=None)
                if c is not None and load[b] - load[c] >= 2:
                    reps[i] = c
                    load[b] -= 1
                    load[c] += 1
                    improved = True


def _lead(grown: dict[TP, list[int]], assignments: Mapping[TP, tuple[int, ...]]) -> dict[TP, tuple[int, ...]]:
    """Choose each grown partition's preferred leader among its replicas: spread within each
    topic first (a topic's produce and fetch load follows its leaders, so balancing only the
    cluster's total left a grown cluster's hottest topic led by one broker), then across the
    cluster; the current leader stays unless a move improves that spread.

    A move needs the topic's leader counts to differ by 2+, or by 1 with the cluster's by 2+:
    each lowers (sum of squared per-topic counts, sum of squared cluster counts), so it ends.
    """
    leads: Counter[int] = Counter()
    per_topic: Counter[tuple[str, int]] = Counter()
    leader = {tp: reps[0] for tp, reps in grown.items()}
    for tp, reps in assignments.items():
        first = leader.get(tp, reps[0] if reps else None)
        if first is not None:
            leads[first] += 1
            per_topic[(tp[0], first)] += 1
    improved = True
    while improved:
        improved = False
        for tp in sorted(grown):
            t, now = tp[0], leader[tp]
            best = min(grown[tp], key=lambda b: (per_topic[(t, b)], leads[b], b != now, b))
            dt, dg = per_topic[(t, now)] - per_topic[(t, best)], leads[now] - leads[best]
            if dt >= 2 or (dt == 1 and dg >= 2):
                leads[now] -= 1
                leads[best] += 1
                per_topic[(t, now)] -= 1
                per_topic[(t, best)] += 1
                leader[tp] = best
                improved = True
    return {tp: (leader[tp], *(b for b in reps if b != leader[tp])) for tp, reps in grown.items()}


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

