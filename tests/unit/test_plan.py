"""The diff engine, on in-memory cluster states (no broker): ownership, refusals, convergence."""

from __future__ import annotations

import dataclasses
import json

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from hanzo_stream.reconcile import ClusterState, Options, Plan, make_plan
from hanzo_stream.reconcile.changes import (
    AddPartitions,
    AlterTopicConfigs,
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
)
from hanzo_stream.reconcile.observe import TopicState
from hanzo_stream.reconcile.render import print_plan
from hanzo_stream.registry.model import Acl, Registry

ALL_PW = Options(available_passwords=frozenset({"x"}))


def empty(brokers: int = 1) -> ClusterState:
    return ClusterState({}, frozenset(), {}, tuple(range(1, brokers + 1)))


def topic(name: str, partitions: int, rf: int = 1, configs: dict | None = None,
          dynamic: frozenset = frozenset(), first: int = 1) -> TopicState:
    """A settled topic whose partitions' replicas start at broker `first` (all in sync)."""
    reps = tuple(tuple(range(first, first + rf)) for _ in range(partitions))
    return TopicState(name, partitions, rf, configs or {}, dynamic, reps, reps)


def _configure(t: TopicState, configs: dict[str, Diff]) -> TopicState:
    cfg, dyn = dict(t.configs), set(t.dynamic)
    for k, v in configs.items():
        if v.after is None:
            cfg.pop(k, None)
            dyn.discard(k)
        else:
            cfg[k] = v.after
            dyn.add(k)
    return dataclasses.replace(t, configs=cfg, dynamic=frozenset(dyn))


def simulate(state: ClusterState, plan: Plan) -> ClusterState:
    """What a broker does with each change: the model the integration tests check for real."""
    topics = dict(state.topics)
    acls = set(state.acls)
    users = dict(state.scram_users)
    quotas = {u: dict(q) for u, q in (state.quotas or {}).items()}
    for c in plan.changes:
        match c:
            case CreateTopic():
                t = topic(c.topic, c.partitions.after, c.replication_factor.after or 1)
                topics[c.topic] = _configure(t, c.configs)
            case AddPartitions():
                t = topics[c.topic]
                extra = c.replicas or (t.replicas[0],) * (c.partitions.after - t.partitions)
                topics[c.topic] = dataclasses.replace(t, partitions=c.partitions.after,
                                                      replicas=t.replicas + extra, isr=t.isr + extra)
            case AlterTopicConfigs() | ClearThrottle():
                topics[c.topic] = _configure(topics[c.topic], c.configs)
            case RaiseReplication():
                t = topics[c.topic]
                reps = list(t.replicas)
                for m in c.moves:
                    reps[m.partition] = m.replicas.after
                t = dataclasses.replace(t, replicas=tuple(reps), isr=tuple(reps), moving={},
                                        replication_factor=c.replication_factor.after)
                topics[c.topic] = _configure(t, {"min.insync.replicas": Diff(
                    None, str(c.min_insync_replicas.after))})
            case CreateAcl():
                acls.add(c.acl)
            case DeleteAcl():
                acls.discard(c.acl)
            case CreateScramUser() | RotateScramPassword():
                users[c.user] = frozenset({"SCRAM-SHA-512"})
            case SetUserQuotas():
                q = quotas.setdefault(c.user, {})
                for k, v in c.quotas.items():
                    q.pop(k) if v.after is None else q.__setitem__(k, v.after)
                if not q:
                    quotas.pop(c.user)
            case DeleteTopic():
                topics.pop(c.topic)
    return ClusterState(topics, frozenset(acls), users, state.brokers, quotas)


def converged(registry: Registry) -> ClusterState:
    return simulate(empty(), make_plan(registry, empty(), ALL_PW))


def test_empty_cluster_gets_everything(registry):
    plan = make_plan(registry, empty(), ALL_PW)
    assert {c.topic for c in plan.of(CreateTopic)} == {t.name for t in registry.topics}
    assert {c.acl for c in plan.of(CreateAcl)} == registry.acls()
    assert {c.user for c in plan.of(CreateScramUser)} == registry.principal_names()
    assert plan.exit_code == 2 and not plan.errors
    create = next(c for c in plan.of(CreateTopic) if c.topic == "audit_log")
    assert create.configs == {"cleanup.policy": Diff(None, "delete"),
                              "retention.ms": Diff(None, str(90 * 86_400_000))}
    assert create.replication_factor == Diff(None, None)  # no profile: the brokers' default


def test_converged_cluster_plans_nothing(registry):
    plan = make_plan(registry, converged(registry), ALL_PW)
    assert plan.changes == [] and plan.exit_code == 0


def _with_topic(state: ClusterState, name: str, **changes) -> ClusterState:
    return dataclasses.replace(state, topics=state.topics | {
        name: dataclasses.replace(state.topics[name], **changes)})


def test_partition_growth_is_planned(registry):
    state = _with_topic(converged(registry), "llm_usage", partitions=4)
    [c] = make_plan(registry, state, ALL_PW).changes
    assert c == AddPartitions("llm_usage", Diff(4, 8))


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
    assert c == AlterTopicConfigs("audit_log", {"retention.ms": Diff("1000", str(90 * 86_400_000))})


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
    assert [c.acl for c in plan.of(CreateAcl)] == [removed]
    assert [c.acl for c in plan.of(DeleteAcl)] == [extra_owned]
    assert any("someone-else" in n for n in plan.notes)
    plan = make_plan(registry, state, Options(allow_delete=True, available_passwords=frozenset()))
    assert {c.acl for c in plan.of(DeleteAcl)} == {extra_owned, foreign}


def test_stray_topics_left_alone_unless_allowed_and_capped(registry):
    base = converged(registry)
    strays = {n: topic(n, 1) for n in ("old_a", "old_b", "__consumer_offsets", "_schemas")}
    state = dataclasses.replace(base, topics=base.topics | strays)
    plan = make_plan(registry, state, ALL_PW)
    assert plan.changes == [] and "old_a" in plan.notes[0] and "_schemas" not in plan.notes[0]
    capped = make_plan(registry, state, Options(allow_delete=True, max_deletions=1))
    assert capped.exit_code == 1 and "--max-deletions" in capped.errors[0]
    allowed = make_plan(registry, state, Options(allow_delete=True, max_deletions=2))
    assert {c.topic for c in allowed.of(DeleteTopic)} == {"old_a", "old_b"}


def test_scram_users_created_rotation_only_on_request(registry):
    state = converged(registry)
    assert make_plan(registry, state, ALL_PW).changes == []
    rotate = make_plan(registry, state, Options(rotate_passwords=True))
    assert {c.user for c in rotate.of(RotateScramPassword)} == registry.principal_names()
    assert any("HANZO_STREAM_PASSWORD_" in n for n in rotate.notes)


def test_without_scram_users_the_plan_leaves_passwords_to_the_reconciler_job(registry):
    """The registry workflow's apply (--no-scram-users): ACLs and topics, never a password, so
    the in-cluster Job stays the one writer; the plan says which principals still lack one."""
    leave = Options(scram_users=False)
    plan = make_plan(registry, empty(), leave)
    assert not plan.of(CreateScramUser) and not plan.of(RotateScramPassword)
    assert {c.acl for c in plan.of(CreateAcl)} == registry.acls()
    [note] = [n for n in plan.notes if "--no-scram-users" in n]
    assert all(p in note for p in registry.principal_names())
    assert not any("HANZO_STREAM_PASSWORD_" in n for n in plan.notes)  # no password asked for
    done = simulate(empty(), make_plan(registry, empty(), ALL_PW))
    again = make_plan(registry, done, leave)
    assert again.changes == [] and again.exit_code == 0
    assert [n for n in again.notes if "--no-scram-users" in n] == [
        "SCRAM users are left to the in-cluster reconciler Job (--no-scram-users)"]


def test_plan_round_trips_through_json(registry):
    plan = make_plan(registry, empty(), ALL_PW)
    again = Plan.from_json(plan.to_json())
    assert again.changes == plan.changes and again.fingerprint == plan.fingerprint
    assert "password" not in json.dumps([c.to_dict() for c in plan.changes])


def test_fingerprint_tracks_cluster_changes(registry):
    a = converged(registry)
    b = _with_topic(a, "llm_usage", partitions=9)
    assert a.fingerprint() == converged(registry).fingerprint() != b.fingerprint()


def with_quotas(registry: Registry, **per_user: dict) -> Registry:
    return dataclasses.replace(registry, principals=tuple(
        dataclasses.replace(p, quotas=tuple(sorted((k, float(v)) for k, v in
                                                   per_user.get(p.name.replace("-", "_"), {}).items())))
        for p in registry.principals))


def test_quotas_are_set_changed_and_removed_for_declared_principals_only(registry):
    reg = with_quotas(registry, llm_gateway={"producer_byte_rate": 1048576, "request_percentage": 50})
    state = dataclasses.replace(converged(registry), quotas={
        "llm-gateway": {"producer_byte_rate": 2097152.0, "consumer_byte_rate": 4096.0},
        "iam-service": {"consumer_byte_rate": 8192.0},  # declared, with no quotas: removed
        "stranger": {"producer_byte_rate": 1024.0}})  # not in the registry: left alone
    plan = make_plan(reg, state, ALL_PW)
    assert {c.user: c.quotas for c in plan.of(SetUserQuotas)} == {
        "llm-gateway": {"producer_byte_rate": Diff(2097152.0, 1048576.0),
                        "consumer_byte_rate": Diff(4096.0, None),
                        "request_percentage": Diff(None, 50.0)},
        "iam-service": {"consumer_byte_rate": Diff(8192.0, None)}}
    assert any("quotas of 1 user(s) not in the registry left alone" in n and "stranger" in n
               for n in plan.notes)
    assert "llm-gateway: consumer_byte_rate: 4096 -> (unset)" in " ".join(
        c.describe() for c in plan.of(SetUserQuotas)).replace("client quotas of ", "")
    after = simulate(state, plan)
    assert after.quotas == {"llm-gateway": {"producer_byte_rate": 1048576.0, "request_percentage": 50.0},
                            "stranger": {"producer_byte_rate": 1024.0}}
    assert make_plan(reg, after, ALL_PW).changes == []
    wiped = make_plan(reg, after, dataclasses.replace(ALL_PW, allow_delete=True))
    assert [(c.user, c.quotas) for c in wiped.of(SetUserQuotas)] == [
        ("stranger", {"producer_byte_rate": Diff(1024.0, None)})]
    assert Plan.from_json(plan.to_json()).changes == plan.changes
    console = Console(record=True, width=200)
    print_plan(plan, console)
    text = console.export_text()
    assert "Client quotas" in text
    assert "~ client quotas of llm-gateway: consumer_byte_rate: 4096 -> (unset), producer_byte_rate: " \
           "2097152 -> 1048576, request_percentage: (unset) -> 50" in text


def test_quotas_that_cannot_be_read_refuse_the_plan_only_when_declared(registry):
    unread = dataclasses.replace(converged(registry), quotas=None)
    assert make_plan(registry, unread, ALL_PW).changes == []
    refused = make_plan(with_quotas(registry, llm_gateway={"producer_byte_rate": 4096}), unread, ALL_PW)
    (error,) = refused.errors
    assert "principals[].quotas" in error and "DESCRIBE_CONFIGS" in error and "Fix:" in error
    # the digest a saved plan is checked against: quotas count once there are any
    assert unread.fingerprint() == converged(registry).fingerprint() != dataclasses.replace(
        unread, quotas={"x": {"producer_byte_rate": 1024.0}}).fingerprint()


# Property: whatever the starting cluster, planning after applying a plan yields nothing.
names = st.sampled_from(["events_plugin_ingestion", "llm_usage", "audit_log", "stray_one", "dead_letter"])
topic_states = st.builds(
    lambda n, p, ret, seg: topic(n, p, 1, {"retention.ms": str(ret), "cleanup.policy": "delete",
                                           "segment.bytes": str(seg)}, frozenset({"retention.ms"})),
    names, st.integers(1, 16), st.sampled_from([1000, 604800000, 1209600000]),
    st.sampled_from([1 << 20, 1 << 30]))
acls = st.builds(Acl, st.sampled_from(["User:llm-gateway", "User:iam-service", "User:*", "User:x"]),
                 st.sampled_from(["TOPIC", "GROUP"]), st.sampled_from(["llm_usage", "audit_log"]),
                 st.just("LITERAL"), st.sampled_from(["READ", "WRITE", "DESCRIBE"]))
quota_values = st.dictionaries(st.sampled_from(["producer_byte_rate", "consumer_byte_rate",
                                                "request_percentage"]),
                               st.sampled_from([1024.0, 1048576.0, 50.0]), min_size=1)
states = st.builds(
    lambda ts, a, u, q: ClusterState({t.name: t for t in ts}, frozenset(a),
                                     {x: frozenset({"SCRAM-SHA-512"}) for x in u}, (1,), q),
    st.lists(topic_states, max_size=5), st.sets(acls, max_size=8),
    st.sets(st.sampled_from(["llm-gateway", "iam-service", "stranger"]), max_size=3),
    st.dictionaries(st.sampled_from(["llm-gateway", "insights-capture", "stranger"]), quota_values,
                    max_size=3))


@settings(max_examples=300, deadline=None)
@given(states, st.booleans())
def test_apply_then_plan_is_empty(registry, state, allow_delete):
    registry = with_quotas(registry, llm_gateway={"producer_byte_rate": 1048576, "request_percentage": 50})
    opts = Options(allow_delete=allow_delete, max_deletions=10, available_passwords=frozenset({"x"}))
    plan = make_plan(registry, state, opts)
    if plan.errors:  # refused plans change nothing; only partition decreases refuse here
        assert all("partitions" in e for e in plan.errors)
        return
    after = simulate(state, plan)
    again = make_plan(registry, after, opts)
    assert again.changes == [], json.loads(again.to_json())["changes"]
