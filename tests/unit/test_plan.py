"""The diff engine, on in-memory cluster states (no broker): ownership, refusals, convergence."""

from __future__ import annotations

import dataclasses
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from hanzo_stream.reconcile import ClusterState, Options, Plan, make_plan
from hanzo_stream.reconcile.observe import TopicState
from hanzo_stream.registry.model import Acl, Registry

ALL_PW = Options(available_passwords=frozenset({"x"}))


def empty() -> ClusterState:
    return ClusterState({}, frozenset(), {})


def simulate(state: ClusterState, plan: Plan) -> ClusterState:
    """What a broker does with each change: the model the integration tests check for real."""
    topics = dict(state.topics)
    acls = set(state.acls)
    users = dict(state.scram_users)
    for c in plan.changes:
        d = c.detail
        match c.kind:
            case "topic.create":
                topics[c.target] = TopicState(c.target, d["partitions"], max(d["replication_factor"], 1),
                                              dict(d["configs"]), frozenset(d["configs"]))
            case "topic.partitions":
                topics[c.target] = dataclasses.replace(topics[c.target], partitions=d["to"])
            case "topic.config":
                t = topics[c.target]
                cfg = t.configs | {k: v["to"] for k, v in d["set"].items()}
                topics[c.target] = dataclasses.replace(t, configs=cfg, dynamic=t.dynamic | set(d["set"]))
            case "acl.create":
                acls.add(Acl(**d))
            case "acl.delete":
                acls.discard(Acl(**d))
            case "scram.create" | "scram.rotate":
                users[c.target] = frozenset({"SCRAM-SHA-512"})
            case "topic.delete":
                topics.pop(c.target)
    return ClusterState(topics, frozenset(acls), users)


def converged(registry: Registry) -> ClusterState:
    return simulate(empty(), make_plan(registry, empty(), ALL_PW))


def test_empty_cluster_gets_everything(registry):
    plan = make_plan(registry, empty(), ALL_PW)
    assert {c.target for c in plan.by_kind("topic.create")} == {t.name for t in registry.topics}
    assert len(plan.by_kind("acl.create")) == len(registry.acls())
    assert {c.target for c in plan.by_kind("scram.create")} == registry.principal_names()
    assert plan.exit_code == 2 and not plan.errors
    create = next(c for c in plan.by_kind("topic.create") if c.target == "audit_log")
    assert create.detail["configs"] == {"cleanup.policy": "delete", "retention.ms": str(90 * 86_400_000)}


def test_converged_cluster_plans_nothing(registry):
    plan = make_plan(registry, converged(registry), ALL_PW)
    assert plan.changes == [] and plan.exit_code == 0


def _with_topic(state: ClusterState, name: str, **changes) -> ClusterState:
    return dataclasses.replace(state, topics=state.topics | {
        name: dataclasses.replace(state.topics[name], **changes)})


def test_partition_growth_is_planned(registry):
    state = _with_topic(converged(registry), "llm_usage", partitions=4)
    [c] = make_plan(registry, state, ALL_PW).changes
    assert (c.kind, c.detail) == ("topic.partitions", {"from": 4, "to": 8})


def test_partition_decrease_is_refused_with_fix(registry):
    state = _with_topic(converged(registry), "llm_usage", partitions=12)
    plan = make_plan(registry, state, ALL_PW)
    assert plan.exit_code == 1
    assert "topics[llm_usage].partitions" in plan.errors[0] and "set partitions: 12" in plan.errors[0]


def test_replication_factor_change_is_refused(registry):
    topics = tuple(dataclasses.replace(t, replication_factor=3) if t.name == "audit_log" else t
                   for t in registry.topics)
    reg = dataclasses.replace(registry, topics=topics)
    plan = make_plan(reg, converged(registry), ALL_PW)
    assert plan.exit_code == 1 and "replication_factor" in plan.errors[0]


def test_config_drift_only_for_declared_keys(registry):
    t = converged(registry).topics["audit_log"]
    drifted = t.configs | {"retention.ms": "1000", "segment.bytes": "1048576",
                           "max.message.bytes": "2000000"}
    state = _with_topic(converged(registry), "audit_log", configs=drifted,
                        dynamic=t.dynamic | {"segment.bytes", "max.message.bytes"})
    [c] = make_plan(registry, state, ALL_PW).changes
    assert c.kind == "topic.config"
    assert c.detail["set"] == {"retention.ms": {"from": "1000", "to": str(90 * 86_400_000)}}


def test_broker_default_equal_to_desired_is_not_a_diff(registry):
    t = converged(registry).topics["llm_usage"]
    state = _with_topic(converged(registry), "llm_usage", dynamic=t.dynamic - {"cleanup.policy"})
    assert make_plan(registry, state, ALL_PW).changes == []


def test_acls_diffed_as_sets_for_owned_principals(registry):
    state = converged(registry)
    removed = next(a for a in state.acls if a.principal == "User:llm-gateway")
    extra_owned = Acl("User:llm-gateway", "TOPIC", "audit_log", "LITERAL", "READ")
    foreign = Acl("User:someone-else", "TOPIC", "audit_log", "LITERAL", "READ")
    state = dataclasses.replace(state, acls=(state.acls - {removed}) | {extra_owned, foreign})
    plan = make_plan(registry, state, ALL_PW)
    assert [Acl(**c.detail) for c in plan.by_kind("acl.create")] == [removed]
    assert [Acl(**c.detail) for c in plan.by_kind("acl.delete")] == [extra_owned]
    assert any("someone-else" in n for n in plan.notes)
    plan = make_plan(registry, state, Options(allow_delete=True, available_passwords=frozenset()))
    assert {Acl(**c.detail) for c in plan.by_kind("acl.delete")} == {extra_owned, foreign}


def test_stray_topics_left_alone_unless_allowed_and_capped(registry):
    base = converged(registry)
    strays = {n: TopicState(n, 1, 1) for n in ("old_a", "old_b", "__consumer_offsets", "_schemas")}
    state = dataclasses.replace(base, topics=base.topics | strays)
    plan = make_plan(registry, state, ALL_PW)
    assert plan.changes == [] and "old_a" in plan.notes[0] and "_schemas" not in plan.notes[0]
    capped = make_plan(registry, state, Options(allow_delete=True, max_deletions=1))
    assert capped.exit_code == 1 and "--max-deletions" in capped.errors[0]
    allowed = make_plan(registry, state, Options(allow_delete=True, max_deletions=2))
    assert {c.target for c in allowed.by_kind("topic.delete")} == {"old_a", "old_b"}


def test_scram_users_created_rotation_only_on_request(registry):
    state = converged(registry)
    assert make_plan(registry, state, ALL_PW).changes == []
    rotate = make_plan(registry, state, Options(rotate_passwords=True))
    assert {c.target for c in rotate.by_kind("scram.rotate")} == registry.principal_names()
    assert any("HANZO_STREAM_PASSWORD_" in n for n in rotate.notes)


def test_plan_round_trips_through_json(registry):
    plan = make_plan(registry, empty(), ALL_PW)
    again = Plan.from_json(plan.to_json())
    assert again.changes == plan.changes and again.fingerprint == plan.fingerprint
    assert all("password" not in json.dumps(c.detail) for c in plan.changes)


def test_fingerprint_tracks_cluster_changes(registry):
    a = converged(registry)
    b = _with_topic(a, "llm_usage", partitions=9)
    assert a.fingerprint() == converged(registry).fingerprint() != b.fingerprint()


# Property: whatever the starting cluster, planning after applying a plan yields nothing.
names = st.sampled_from(["events_plugin_ingestion", "llm_usage", "audit_log", "stray_one", "dead_letter"])
topic_states = st.builds(
    lambda n, p, ret, seg: TopicState(n, p, 1, {"retention.ms": str(ret), "cleanup.policy": "delete",
                                                 "segment.bytes": str(seg)}, frozenset({"retention.ms"})),
    names, st.integers(1, 16), st.sampled_from([1000, 604800000, 1209600000]),
    st.sampled_from([1 << 20, 1 << 30]))
acls = st.builds(Acl, st.sampled_from(["User:llm-gateway", "User:iam-service", "User:*", "User:x"]),
                 st.sampled_from(["TOPIC", "GROUP"]), st.sampled_from(["llm_usage", "audit_log"]),
                 st.just("LITERAL"), st.sampled_from(["READ", "WRITE", "DESCRIBE"]))
states = st.builds(
    lambda ts, a, u: ClusterState({t.name: t for t in ts}, frozenset(a),
                                  {x: frozenset({"SCRAM-SHA-512"}) for x in u}),
    st.lists(topic_states, max_size=5), st.sets(acls, max_size=8),
    st.sets(st.sampled_from(["llm-gateway", "iam-service", "stranger"]), max_size=3))


@settings(max_examples=300, deadline=None)
@given(states, st.booleans())
def test_apply_then_plan_is_empty(registry, state, allow_delete):
    opts = Options(allow_delete=allow_delete, max_deletions=10, available_passwords=frozenset({"x"}))
    plan = make_plan(registry, state, opts)
    if plan.errors:  # refused plans change nothing; only partition decreases refuse here
        assert all("partitions" in e for e in plan.errors)
        return
    after = simulate(state, plan)
    again = make_plan(registry, after, opts)
    assert again.changes == [], json.loads(again.to_json())["changes"]
