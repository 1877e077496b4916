"""Replication-factor increases without a broker: placement, bytes, throttle, refusals, min ISR."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from hanzo_stream.core.broker_config import PROFILES, Replication
from hanzo_stream.reconcile import ClusterState, Options, Plan, make_plan
from hanzo_stream.reconcile.changes import (
    AddPartitions,
    AlterTopicConfigs,
    ClearThrottle,
    Diff,
    Move,
    RaiseReplication,
)
from hanzo_stream.reconcile.replication import estimate_seconds, moves, place, throttle_configs
from hanzo_stream.registry.model import Registry

from .test_plan import ALL_PW, converged, simulate, topic

MB = 1 << 20


def _on_brokers(state: ClusterState, brokers: int) -> ClusterState:
    return dataclasses.replace(state, brokers=tuple(range(1, brokers + 1)))


def _with_profile(registry: Registry, profile: str = "cluster") -> Registry:
    return dataclasses.replace(registry, replication_profile=profile)


def _grown(registry: Registry, brokers: int = 3) -> tuple[Registry, ClusterState]:
    """The HIP registry converged on one broker (RF 1, min ISR 1), then brokers added and the
    profile switched on: the state issue 10 starts from."""
    state = converged(registry)
    state = dataclasses.replace(state, topics={
        n: dataclasses.replace(t, configs=t.configs | {"min.insync.replicas": "1"},
                               sizes={p: (p + 1) * MB for p in range(t.partitions)})
        for n, t in state.topics.items()})
    return _with_profile(registry), _on_brokers(state, brokers)


# ---------------------------------------------------------------- placement

def test_one_to_three_every_partition_gets_both_new_brokers_and_leaders_spread():
    current = {("t", p): (1,) for p in range(8)}
    placed = place((1, 2, 3), current, {"t": 3})
    assert set(placed) == set(current)
    assert all(sorted(r) == [1, 2, 3] for r in placed.values())
    leaders = Counter(r[0] for r in placed.values())
    assert max(leaders.values()) - min(leaders.values()) <= 1, leaders


def test_placement_is_deterministic_and_keeps_partitions_already_at_target():
    current = {("a", 0): (1,), ("a", 1): (2, 3), ("b", 0): (1,)}
    assert place((1, 2, 3), current, {"a": 2}) == place((1, 2, 3), dict(reversed(current.items())), {"a": 2})
    assert ("a", 1) not in place((1, 2, 3), current, {"a": 2})  # already 2 replicas
    assert ("b", 0) not in place((1, 2, 3), current, {"a": 2})  # not asked for


clusters = st.integers(2, 6).flatmap(lambda n: st.tuples(
    st.just(tuple(range(1, n + 1))),
    st.lists(st.tuples(st.integers(1, 4), st.integers(1, n)), min_size=1, max_size=4),  # (parts, broker)
    st.integers(2, n)))


@settings(max_examples=400, deadline=None)
@given(clusters, st.booleans())
def test_placement_keeps_replicas_and_leaves_no_single_move_that_would_balance_better(case, led):
    brokers, topics, rf = case
    current = {(f"t{i}", p): (b,) for i, (parts, b) in enumerate(topics) for p in range(parts)}
    if led:  # some partitions already have two replicas: the counts must see them
        current = {tp: r + ((r[0] % len(brokers)) + 1,) if tp[1] % 2 else r for tp, r in current.items()}
    placed = place(brokers, current, {f"t{i}": rf for i in range(len(topics))})
    assert set(placed) == {tp for tp, r in current.items() if len(r) < rf}
    for tp, reps in placed.items():
        assert len(reps) == len(set(reps)) == rf and set(current[tp]) <= set(reps) <= set(brokers)
    final = current | placed
    load = Counter({b: 0 for b in brokers})
    leads = Counter({b: 0 for b in brokers})
    per_topic = Counter()
    for tp, reps in final.items():
        load.update(reps)
        leads[reps[0]] += 1
        per_topic[(tp[0], reps[0])] += 1
    for tp, reps in placed.items():
        for b in set(reps) - set(current[tp]):  # a new replica: could it sit somewhere emptier?
            assert all(load[b] - load[c] <= 1 for c in brokers if c not in reps), (tp, reps, load)
        # no single leader move spreads the topic's leaders, or (even within it) the cluster's
        for c in reps:
            dt = per_topic[(tp[0], reps[0])] - per_topic[(tp[0], c)]
            assert dt <= 1 and not (dt == 1 and leads[reps[0]] - leads[c] >= 2), (tp, reps, per_topic)


def test_new_replicas_go_to_a_rack_the_partition_is_not_in_yet():
    """Brokers 1 and 2 share a zone, 3 is alone in another: RF 1 -> 2 must put every second
    copy in the other zone, although broker 2 is as empty as broker 3."""
    current = {("t", p): ((1, 2)[p % 2],) for p in range(6)}
    racks = {1: "zone-a", 2: "zone-a", 3: "zone-b"}
    placed = place((1, 2, 3), current, {"t": 2}, racks)
    assert all({racks[b] for b in reps} == {"zone-a", "zone-b"} for reps in placed.values()), placed
    unaware = place((1, 2, 3), current, {"t": 2})
    assert any({racks[b] for b in reps} == {"zone-a"} for reps in unaware.values())  # what it prevents


racked = clusters.flatmap(lambda case: st.tuples(
    st.just(case), st.lists(st.sampled_from("abc"), min_size=len(case[0]), max_size=len(case[0]))))


@settings(max_examples=300, deadline=None)
@given(racked)
def test_placement_spreads_each_partition_over_as_many_racks_as_it_can(args):
    (brokers, topics, rf), names = args
    racks = dict(zip(brokers, names, strict=True))
    current = {(f"t{i}", p): (b,) for i, (parts, b) in enumerate(topics) for p in range(parts)}
    placed = place(brokers, current, {f"t{i}": rf for i in range(len(topics))}, racks)
    load = Counter({b: 0 for b in brokers})
    for reps in (current | placed).values():
        load.update(reps)
    for tp, reps in placed.items():
        assert len(set(reps)) == rf and set(current[tp]) <= set(reps)
        assert len({racks[b] for b in reps}) == min(rf, len(set(names))), (reps, racks)
        for b in set(reps) - set(current[tp]):  # emptier brokers only where a rack would be lost
            spread = len({racks[x] for x in reps})
            assert all(load[b] - load[c] <= 1 for c in brokers if c not in reps and
                       len({racks[x] for x in reps if x != b} | {racks[c]}) >= spread), (tp, reps, load)


# ---------------------------------------------------------------- bytes, throttle, estimate

def test_moves_count_bytes_per_new_replica_and_flag_running_ones():
    settled = {0: (1,), 1: (2,), 2: (3, 1)}
    targets = {0: (2, 1, 3), 1: (2, 3), 2: (3, 1)}
    ms = moves(settled, targets, {0: 10 * MB, 1: 4 * MB, 2: 99 * MB}, running={1})
    assert ms == (Move(0, Diff((1,), (2, 1, 3)), 20 * MB, False),
                  Move(1, Diff((2,), (2, 3)), 4 * MB, True))
    assert [m.new_replicas for m in ms] == [(2, 3), (3,)]


def test_throttle_lists_source_replicas_as_leaders_and_new_ones_as_followers():
    ms = (Move(0, Diff((1,), (2, 1, 3))), Move(3, Diff((2, 3), (2, 3, 1))))
    assert throttle_configs(ms) == {
        "leader.replication.throttled.replicas": "0:1,3:2,3:3",
        "follower.replication.throttled.replicas": "0:2,0:3,3:1",
    }


def test_estimate_is_the_busiest_broker_over_the_rate():
    ms = (Move(0, Diff((1,), (1, 2, 3)), 20 * MB), Move(1, Diff((1,), (1, 2, 3)), 10 * MB))
    # broker 1 serves all 30 MiB; 2 and 3 each fetch 15 MiB
    assert estimate_seconds(ms, 10 * MB) == 3.0


# ---------------------------------------------------------------- min ISR

def test_min_isr_never_reaches_the_replication_factor():
    ha = PROFILES["ha"]
    assert [ha.min_isr_for(rf) for rf in (1, 2, 3, 5)] == [1, 1, 2, 2]
    assert Replication.for_cluster(1) is PROFILES["single"] and Replication.for_cluster(3) is ha


# ---------------------------------------------------------------- the plan

def test_profile_raises_every_topic_as_a_reassignment(registry):
    reg, state = _grown(registry)
    plan = make_plan(reg, state, Options(available_passwords=frozenset({"x"}), throttle=5 * MB))
    assert not plan.errors
    raises = {c.topic: c for c in plan.of(RaiseReplication)}
    assert set(raises) == {t.name for t in registry.topics}
    llm = raises["llm_usage"]
    assert llm.replication_factor == Diff(1, 3) and llm.throttle == 5 * MB
    assert [m.partition for m in llm.moves] == list(range(8))
    assert all(sorted(m.replicas.after) == [1, 2, 3] for m in llm.moves)
    assert llm.bytes == sum(2 * (p + 1) * MB for p in range(8))
    # min ISR: raised only by the move, after it; no separate config change races it
    assert llm.min_insync_replicas == Diff(1, 2) and llm.min_insync_during is None
    assert not [c for c in plan.of(AlterTopicConfigs) if "min.insync.replicas" in c.configs]
    leaders = Counter(m.replicas.after[0] for c in raises.values() for m in c.moves)
    assert max(leaders.values()) - min(leaders.values()) <= 1, leaders
    for c in raises.values():  # and within each topic: its load follows its leaders
        mine = Counter(m.replicas.after[0] for m in c.moves)
        assert max(mine.values()) - min(mine.get(b, 0) for b in (1, 2, 3)) <= 1, (c.topic, mine)


def test_min_isr_above_what_current_replicas_allow_drops_before_the_move(registry):
    reg, state = _grown(registry)
    t = state.topics["audit_log"]
    state = dataclasses.replace(state, topics=state.topics | {"audit_log": dataclasses.replace(
        t, configs=t.configs | {"min.insync.replicas": "2"})})  # broker default of a 3-node cluster
    [c] = [c for c in make_plan(reg, state, ALL_PW).of(RaiseReplication) if c.topic == "audit_log"]
    assert c.min_insync_replicas == Diff(2, 2) and c.min_insync_during == 1


def test_decrease_is_refused_with_reason_and_fix(registry):
    reg, state = _grown(registry)
    state = simulate(state, make_plan(reg, state, ALL_PW))  # now RF 3
    lowered = dataclasses.replace(reg, topics=tuple(
        dataclasses.replace(t, replication_factor=1) if t.name == "llm_usage" else t for t in reg.topics))
    plan = make_plan(lowered, state, ALL_PW)
    assert plan.exit_code == 1 and not plan.of(RaiseReplication)
    [err] = plan.errors
    assert "topics[llm_usage].replication_factor: 1 is below the live 3" in err
    assert "never removes replicas" in err and "Fix: set replication_factor: 3" in err


def test_a_broker_restarting_in_a_roll_does_not_shrink_the_cluster_profile(registry):
    """Mid-roll one broker of three is not live; its replicas are still assigned to it. The
    `cluster` profile stays at three brokers: no "below the live 3" refusal, nothing to do
    (the reconciler Job on the real Kubernetes failed four times on this)."""
    reg, state = _grown(registry)
    state = simulate(state, make_plan(reg, state, ALL_PW))  # now RF 3 on brokers 1..3
    rolling = _on_brokers(state, 2)  # broker 3 restarting
    assert rolling.size == 3
    plan = make_plan(reg, rolling, ALL_PW)
    assert plan.exit_code == 0 and not plan.errors and not plan.of(RaiseReplication), plan.errors


def test_more_replicas_than_brokers_is_refused(registry):
    reg, state = _grown(registry, brokers=2)
    forced = dataclasses.replace(reg, replication_profile="ha")
    plan = make_plan(forced, state, ALL_PW)
    assert plan.exit_code == 1 and not plan.of(RaiseReplication)
    assert "3 replicas need 3 brokers; the cluster has 2" in plan.errors[0]
    assert "Fix: add brokers first" in plan.errors[0]
    # the cluster profile of a 2-broker cluster is `single`: nothing to do, nothing refused
    assert make_plan(reg, state, ALL_PW).changes == []


def test_kafkas_own_topics_follow_the_profile_up_never_down(registry):
    """__consumer_offsets created on one broker is RF 1: the grown cluster raises it with the
    registry's topics (or one broker's loss takes every group's position); never lowers it."""
    reg, state = _grown(registry)
    offsets = topic("__consumer_offsets", 50, 1, {"cleanup.policy": "compact"})
    state = dataclasses.replace(state, topics=state.topics | {offsets.name: offsets})
    plan = make_plan(reg, state, ALL_PW)
    assert not plan.errors
    [c] = [c for c in plan.of(RaiseReplication) if c.topic == "__consumer_offsets"]
    assert c.replication_factor == Diff(1, 3) and len(c.moves) == 50
    for r in plan.of(RaiseReplication):  # 50 offsets partitions led by broker 1 skew no topic
        mine = Counter(m.replicas.after[0] for m in r.moves)
        assert max(mine.values()) - min(mine.get(b, 0) for b in (1, 2, 3)) <= 1, (r.topic, mine)
    after = simulate(state, plan)
    assert after.topics["__consumer_offsets"].replication_factor == 3
    assert after.topics["__consumer_offsets"].configs["cleanup.policy"] == "compact"
    assert make_plan(reg, after, ALL_PW).changes == []
    # a profile below what Kafka's own topic has: left alone, not refused
    single = dataclasses.replace(reg, replication_profile="single")
    assert not [e for e in make_plan(single, after, ALL_PW).errors if "__consumer_offsets" in e]
    assert not [c for c in make_plan(single, after, ALL_PW).changes if c.target == "__consumer_offsets"]
    # no profile: Kafka's own topics are not the registry's business
    none = dataclasses.replace(reg, replication_profile=None)
    assert not [c for c in make_plan(none, state, ALL_PW).changes if c.target == "__consumer_offsets"]


def _interrupted(state: ClusterState, plan: Plan, topic_name: str, done: set[int]) -> ClusterState:
    """The cluster after apply started the move of `topic_name` and was interrupted: partitions
    in `done` finished, the others run; the throttle is on."""
    [c] = [c for c in plan.of(RaiseReplication) if c.topic == topic_name]
    t = state.topics[topic_name]
    reps, isr, moving = list(t.replicas), list(t.isr), {}
    for m in c.moves:
        reps[m.partition] = m.replicas.after
        if m.partition in done:
            isr[m.partition] = m.replicas.after
        else:
            moving[m.partition] = (m.new_replicas, ())
    cfg = throttle_configs(c.moves)
    t = dataclasses.replace(t, replicas=tuple(reps), isr=tuple(isr), moving=moving,
                            replication_factor=1, configs=t.configs | cfg, dynamic=t.dynamic | set(cfg))
    return dataclasses.replace(state, topics=state.topics | {topic_name: t})


def test_rerun_resumes_the_running_reassignment_with_the_same_targets(registry):
    reg, state = _grown(registry)
    first = make_plan(reg, state, ALL_PW)
    mid = _interrupted(state, first, "llm_usage", done={0, 1, 2})
    again = make_plan(reg, mid, ALL_PW)
    [c] = [c for c in again.of(RaiseReplication) if c.topic == "llm_usage"]
    [before] = [c for c in first.of(RaiseReplication) if c.topic == "llm_usage"]
    assert c.resumes and {m.partition for m in c.moves if m.running} == set(range(3, 8))
    assert {m.partition: m.replicas.after for m in c.moves} == \
        {m.partition: m.replicas.after for m in before.moves if m.partition >= 3}
    assert c.replication_factor == Diff(1, 3)
    assert not again.of(ClearThrottle)  # the move owns its throttle
    assert mid.fingerprint() == state.fingerprint()  # throttle keys do not make a plan stale


def test_someone_elses_reassignment_is_refused(registry):
    reg, state = _grown(registry)
    t = state.topics["audit_log"]
    foreign = dataclasses.replace(t, replicas=((1, 2),) + t.replicas[1:], moving={0: ((2,), ())})
    plan = make_plan(reg, dataclasses.replace(state, topics=state.topics | {"audit_log": foreign}), ALL_PW)
    assert plan.exit_code == 1
    assert any("partition(s) 0 of audit_log are being reassigned" in e for e in plan.errors)


def test_throttle_left_by_an_interrupted_apply_is_cleared(registry):
    reg, state = _grown(registry)
    done = simulate(state, make_plan(reg, state, ALL_PW))
    t = done.topics["dead_letter"]
    cfg = {"leader.replication.throttled.replicas": "0:1", "follower.replication.throttled.replicas": "0:2"}
    left = dataclasses.replace(done, topics=done.topics | {"dead_letter": dataclasses.replace(
        t, configs=t.configs | cfg, dynamic=t.dynamic | set(cfg))})
    [c] = make_plan(reg, left, ALL_PW).changes
    assert c == ClearThrottle("dead_letter", {k: Diff(v, None) for k, v in cfg.items()})


def test_replication_plan_round_trips_through_json_and_review_ignores_drift(registry):
    reg, state = _grown(registry)
    plan = make_plan(reg, state, ALL_PW)
    again = Plan.from_json(plan.to_json())
    assert again.changes == plan.changes
    doc = json.loads(plan.to_json())
    move = next(c for c in doc["changes"] if c["kind"] == "topic.replication")["moves"][0]
    assert set(move) == {"partition", "replicas", "bytes", "running"}
    assert set(move["replicas"]) == {"before", "after"}
    grown_more = dataclasses.replace(state, topics={
        n: dataclasses.replace(t, sizes={p: s + MB for p, s in t.sizes.items()})
        for n, t in state.topics.items()})
    later = make_plan(reg, grown_more, ALL_PW)
    assert later.changes != plan.changes  # more bytes to copy now
    assert [c.reviewed() for c in later.changes] == [c.reviewed() for c in plan.changes]


profiles = st.sampled_from(["cluster", "single", "ha"])
rfs = st.dictionaries(st.sampled_from(["llm_usage", "audit_log", "dead_letter", "billing_events"]),
                      st.integers(1, 3))


@settings(max_examples=150, deadline=None)
@given(profiles, rfs, st.integers(1, 4), st.sets(st.sampled_from(["llm_usage", "audit_log"])))
def test_apply_then_plan_is_empty_with_replication(registry, profile, live_rf, brokers, short):
    """Whatever factors the live topics have (and whether partitions are missing too), a plan
    that is not refused converges in one apply."""
    base = converged(registry)
    topics = dict(base.topics)
    for n, rf in live_rf.items():
        if rf <= brokers:
            t = topics[n]
            parts = t.partitions // 2 if n in short else t.partitions
            topics[n] = topic(n, parts, rf, t.configs, t.dynamic, first=1)
    state = ClusterState(topics, base.acls, base.scram_users, tuple(range(1, brokers + 1)))
    reg = _with_profile(registry, profile)
    plan = make_plan(reg, state, ALL_PW)
    if plan.errors:  # refused: a decrease, or more replicas than brokers
        assert all("below the live" in e or "brokers" in e for e in plan.errors), plan.errors
        return
    after = simulate(state, plan)
    assert make_plan(reg, after, ALL_PW).changes == []
    for c in plan.of(RaiseReplication):
        isr = int(after.topics[c.topic].configs["min.insync.replicas"])
        assert isr <= max(1, c.replication_factor.after - 1)


def test_new_partitions_of_a_managed_topic_are_born_at_its_factor(registry):
    reg, state = _grown(registry)
    state = simulate(state, make_plan(reg, state, ALL_PW))  # RF 3 everywhere
    more = dataclasses.replace(reg, topics=tuple(
        dataclasses.replace(t, partitions=12) if t.name == "llm_usage" else t for t in reg.topics))
    plan = make_plan(more, state, ALL_PW)
    [c] = plan.changes
    assert Plan.from_json(plan.to_json()).changes == [c]
    assert isinstance(c, AddPartitions) and c.partitions == Diff(8, 12)
    assert len(c.replicas) == 4 and all(sorted(r) == [1, 2, 3] for r in c.replicas)
    assert sorted(r[0] for r in c.replicas) != [c.replicas[0][0]] * 4  # leaders spread
