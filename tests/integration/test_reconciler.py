"""The reconciler against a real KRaft broker with SASL_SSL and the StandardAuthorizer."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from pathlib import Path

import pytest
import yaml
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from typer.testing import CliRunner

from hanzo_stream.cli import app
from hanzo_stream.reconcile import Options, execute, make_plan, observe
from hanzo_stream.reconcile import plan as reconcile_plan
from hanzo_stream.reconcile import run as reconcile_run
from hanzo_stream.reconcile.changes import DeleteTopic
from hanzo_stream.reconcile.plan import watched_configs
from hanzo_stream.reconcile.run import await_visible
from hanzo_stream.registry import load_registry, platform
from hanzo_stream.registry.model import Acl

from .conftest import Cluster, apply_registry, start_local, wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


RACKS = {1: "zone-a", 2: "zone-a", 3: "zone-b"}  # two brokers share a zone: placement must see it


@pytest.fixture(scope="module")
def kafka_cluster3(tmp_path_factory, registry):
    """This module's three brokers, in two zones (broker.rack)."""
    from hanzo_stream.local import kafka

    home = tmp_path_factory.mktemp("kafka3")
    try:
        yield start_local(home, registry, brokers=3, racks=RACKS)
    finally:
        kafka.stop(home / "kafka")


def invoke(cluster: Cluster, *args: str, principal: str = "admin", mechanism: str = "SCRAM-SHA-512"):
    conn = cluster.as_(principal, mechanism)
    env = {k: v for k, v in (line.split(" ", 1)[1].split("=", 1)
                             for line in conn.env_exports().splitlines())}
    env = {k: v.strip("'") for k, v in env.items()}
    return CliRunner().invoke(app, list(args), env=env)


def cli(cluster: Cluster, *args: str, principal: str = "admin",
        mechanism: str = "SCRAM-SHA-512") -> tuple[int, str]:
    result = invoke(cluster, *args, principal=principal, mechanism=mechanism)
    return result.exit_code, result.output


def test_apply_creates_hip_registry_as_declared(hip_cluster, registry):
    state = observe(hip_cluster.admin_client())
    for t in registry.topics:
        live = state.topics[t.name]
        assert live.partitions == t.partitions
        assert live.configs["retention.ms"] == str(t.retention_ms)
        assert live.configs["cleanup.policy"] == "delete"
        assert {"retention.ms", "cleanup.policy"} <= live.dynamic
    assert registry.acls() <= state.acls
    assert {p for p, mech in state.scram_users.items() if "SCRAM-SHA-512" in mech} >= \
        registry.principal_names()


def test_converged_apply_makes_zero_mutating_calls(hip_cluster, registry):
    plan, result, admin = apply_registry(hip_cluster, registry)
    assert plan.changes == [] and result.applied == []
    assert admin.mutations == 0
    assert set(admin.calls) == {"list_topics", "describe_configs", "describe_acls", "describe_cluster",
                                "describe_user_scram_credentials", "describe_client_quotas"}
    assert sum(admin.calls.values()) == 6


def test_cli_plan_exit_codes(hip_cluster, tmp_path):
    code, output = cli(hip_cluster, "plan", "--registry", str(ROOT / "topics.yaml"))
    assert code == 0, output
    assert "No changes" in output
    data = yaml.safe_load((ROOT / "topics.yaml").read_text())
    data["topics"].append({"name": "pending_topic", "partitions": 4, "retention": "1d",
                           "key": "team_id", "producers": ["llm-gateway"]})
    reg = tmp_path / "topics.yaml"
    reg.write_text(yaml.safe_dump(data))
    code, output = cli(hip_cluster, "plan", "--registry", str(reg), "--json")
    assert code == 2, output
    doc = json.loads(output)
    assert {c["target"] for c in doc["changes"]} == {"pending_topic", "User:llm-gateway"}
    assert "pending_topic" not in observe(hip_cluster.admin_client()).topics  # plan changed nothing
    code, output = cli(hip_cluster, "plan", "--bootstrap", "127.0.0.1:1", "--registry", str(reg))
    assert code == 1 and "cannot read the cluster" in output


def test_the_pull_request_planner_plans_and_can_change_nothing(hip_cluster, tmp_path):
    """What the PR workflow runs: plan as `registry-planner` (DESCRIBE only). It sees the whole
    diff; the brokers' validate-only pass, which Kafka authorizes like the real request, is
    reported as not judged (apply judges it, as a principal that may) instead of as the
    change being wrong; and the same login cannot apply, create or alter anything."""
    data = yaml.safe_load((ROOT / "topics.yaml").read_text())
    data["topics"].append({"name": "planned_by_pr", "partitions": 4, "retention": "1d",
                           "key": "team_id", "producers": ["llm-gateway"]})
    data["topics"][0]["retention"] = "6d"
    reg = tmp_path / "topics.yaml"
    reg.write_text(yaml.safe_dump(data))
    planner = platform.REGISTRY_PLANNER
    code, output = cli(hip_cluster, "plan", "--registry", str(reg), "--json", principal=planner)
    assert code == 2, output
    doc = json.loads(output)
    assert {c["target"] for c in doc["changes"]} >= {"planned_by_pr", data["topics"][0]["name"]}
    assert not doc["errors"]
    (note,) = [n for n in doc["notes"] if n.startswith("not judged by the brokers")]
    assert "planned_by_pr" in note and data["topics"][0]["name"] in note
    # as admin the same plan is judged, with no such note
    code, output = cli(hip_cluster, "plan", "--registry", str(reg), "--json")
    assert code == 2 and not [n for n in json.loads(output)["notes"] if "not judged" in n]

    code, output = cli(hip_cluster, "apply", "--registry", str(reg), principal=planner)
    assert code == 1, output
    live = observe(hip_cluster.admin_client())
    assert "planned_by_pr" not in live.topics
    assert live.topics[data["topics"][0]["name"]].configs["retention.ms"] != str(6 * 86_400_000)
    from confluent_kafka.admin import AdminClient, NewTopic

    as_planner = AdminClient(hip_cluster.as_(planner).confluent())
    (fut,) = as_planner.create_topics([NewTopic("planned_by_pr", 1)],
                                      request_timeout=20).values()
    with pytest.raises(KafkaException) as denied:
        fut.result(timeout=30)
    assert denied.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_the_workflow_applies_the_reviewed_plan_without_writing_a_password(hip_cluster, tmp_path):
    """registry.yml: the planner plans and the admin (over PLAIN, the admin's only mechanism)
    applies the reviewed plan, both with --no-scram-users. A new principal gets its topic's
    ACLs and no SCRAM user, and the plan names it; SCRAM passwords stay the reconciler Job's."""
    data = yaml.safe_load((ROOT / "topics.yaml").read_text())
    data["principals"].append({"name": "newcomer-svc", "description": "A service a PR adds."})
    data["topics"].append({"name": "newcomer_events", "partitions": 4, "retention": "1d",
                           "key": "team_id", "producers": ["newcomer-svc"]})
    reg = tmp_path / "topics.yaml"
    reg.write_text(yaml.safe_dump(data))
    plan_file = tmp_path / "plan.json"
    code, output = cli(hip_cluster, "plan", "--registry", str(reg), "--no-scram-users",
                       "--out", str(plan_file), principal=platform.REGISTRY_PLANNER)
    assert code == 2, output
    doc = json.loads(plan_file.read_text())
    assert not [c for c in doc["changes"] if c["kind"].startswith("scram.")], output
    (note,) = [n for n in doc["notes"] if "--no-scram-users" in n]
    assert "newcomer-svc" in note
    try:
        code, output = cli(hip_cluster, "apply", "--registry", str(reg), "--plan", str(plan_file),
                           "--no-scram-users", mechanism="PLAIN")
        assert code == 0, output
        live = observe(hip_cluster.admin_client())
        assert "newcomer_events" in live.topics
        assert any(a.principal == "User:newcomer-svc" for a in live.acls)
        assert "newcomer-svc" not in live.scram_users  # no password written
        code, output = cli(hip_cluster, "plan", "--registry", str(reg), "--no-scram-users",
                           "--rotate-passwords")
        assert code == 64 and "drop one" in output
    finally:
        admin = hip_cluster.admin_client()
        admin.delete_topics(["newcomer_events"], request_timeout=30)
        flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:newcomer-svc",
                               None, AclOperation.ANY, AclPermissionType.ANY)
        for fut in admin.delete_acls([flt], request_timeout=30).values():
            fut.result(timeout=30)


def test_drift_is_shown_and_repaired_unowned_keys_kept(hip_cluster, registry):
    admin = hip_cluster.admin_client()
    # By hand: a changed managed config, an unowned config key, a removed ACL, an extra ACL.
    admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, "audit_log", incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("segment.bytes", "16777216", incremental_operation=AlterConfigOpType.SET)])]
    )[ConfigResource(ResourceType.TOPIC, "audit_log")].result()
    removed = AclBinding(ResourceType.TOPIC, "llm_usage", ResourcePatternType.LITERAL,
                         "User:llm-gateway", "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    extra = AclBinding(ResourceType.TOPIC, "audit_log", ResourcePatternType.LITERAL,
                       "User:llm-gateway", "*", AclOperation.READ, AclPermissionType.ALLOW)
    foreign = AclBinding(ResourceType.TOPIC, "audit_log", ResourcePatternType.LITERAL,
                         "User:not-in-registry", "*", AclOperation.READ, AclPermissionType.ALLOW)
    flt = AclBindingFilter(removed.restype, removed.name, removed.resource_pattern_type,
                           removed.principal, removed.host, removed.operation, removed.permission_type)
    admin.delete_acls([flt])[flt].result()
    for f in admin.create_acls([extra, foreign]).values():
        f.result()

    opts = Options(available_passwords=frozenset())
    counted = hip_cluster.counting_admin()
    # A plan reads only the configs it compares, by name through the kafka-python bridge; the
    # same as confluent-kafka's full read, filtered.
    watched = watched_configs(registry)
    named = observe(counted, watched)
    assert named.topics == observe(admin, watched).topics
    assert "segment.bytes" in observe(admin).topics["audit_log"].dynamic  # set above
    assert "segment.bytes" not in named.topics["audit_log"].configs  # no plan reads it
    plan = reconcile_plan(counted, registry, opts)
    described = sorted(f"{c.SYMBOL} {c.describe()}" for c in plan.changes)
    assert described == [
        "+ User:llm-gateway ALLOW WRITE on topic llm_usage",
        "- User:llm-gateway ALLOW READ on topic audit_log",
        f"~ topic audit_log: retention.ms: 3600000 -> {90 * 86_400_000}",
    ]
    assert any("not-in-registry" in n for n in plan.notes)
    result = execute(counted, plan, {})
    assert result.ok and await_visible(counted, registry, result.applied, opts)
    counted.close()  # its kafka-python bridge would outlive the test
    state = observe(admin)
    assert state.topics["audit_log"].configs["retention.ms"] == str(90 * 86_400_000)
    assert state.topics["audit_log"].configs["segment.bytes"] == "16777216"  # left alone
    assert Acl("User:not-in-registry", "TOPIC", "audit_log", "LITERAL", "READ") in state.acls
    assert make_plan(registry, state, opts).changes == []


def test_destructive_changes_are_refused_and_change_nothing(hip_cluster, registry, tmp_path):
    data = yaml.safe_load((ROOT / "topics.yaml").read_text())
    next(t for t in data["topics"] if t["name"] == "llm_usage")["partitions"] = 4
    reg = tmp_path / "topics.yaml"
    reg.write_text(yaml.safe_dump(data))
    before = observe(hip_cluster.admin_client()).fingerprint()
    code, output = cli(hip_cluster, "apply", "--registry", str(reg))
    assert code == 1
    assert "topics[llm_usage].partitions" in output and "cannot remove partitions" in output
    assert observe(hip_cluster.admin_client()).fingerprint() == before


def test_deletion_is_opt_in_capped_and_spares_internal_topics(hip_cluster, registry):
    admin = hip_cluster.admin_client()
    for f in admin.create_topics([NewTopic("stray_one", 1), NewTopic("_internal_thing", 1)]).values():
        f.result()
    counted = hip_cluster.counting_admin()
    plan = reconcile_plan(counted, registry, Options())
    assert not plan.of(DeleteTopic) and "stray_one" in " ".join(plan.notes)
    capped = reconcile_plan(counted, registry, Options(allow_delete=True, max_deletions=0))
    assert capped.exit_code == 1
    allowed = reconcile_plan(counted, registry, Options(allow_delete=True, max_deletions=1))
    assert [c.topic for c in allowed.of(DeleteTopic)] == ["stray_one"]
    counted.close()
    assert execute(admin, allowed, {}).ok
    topics = admin.list_topics(timeout=10).topics
    assert "stray_one" not in topics and "_internal_thing" in topics


def test_saved_plan_refused_when_cluster_changed(hip_cluster, tmp_path):
    data = yaml.safe_load((ROOT / "topics.yaml").read_text())
    data["topics"].append({"name": "planned_topic", "partitions": 4, "retention": "1d", "key": "team_id"})
    reg = tmp_path / "topics.yaml"
    reg.write_text(yaml.safe_dump(data))
    plan_file = tmp_path / "plan.json"
    code, _ = cli(hip_cluster, "plan", "--registry", str(reg), "--out", str(plan_file))
    assert code == 2
    admin = hip_cluster.admin_client()
    admin.create_topics([NewTopic("someone_elses_topic", 1)])["someone_elses_topic"].result()
    code, output = cli(hip_cluster, "apply", "--registry", str(reg), "--plan", str(plan_file))
    assert code == 1 and "cluster changed since" in output
    assert "planned_topic" not in admin.list_topics(timeout=10).topics
    code, _ = cli(hip_cluster, "plan", "--registry", str(reg), "--out", str(plan_file))
    code, output = cli(hip_cluster, "apply", "--registry", str(reg), "--plan", str(plan_file))
    assert code == 0, output
    assert "planned_topic" in admin.list_topics(timeout=10).topics


def test_saved_plan_refused_when_registry_changed_since_review(hip_cluster, tmp_path):
    """A plan reviewed for one registry is never applied for another (a PR updated after review,
    or another PR merged first): same cluster fingerprint, different changes -> exit 1."""
    data = yaml.safe_load((ROOT / "topics.yaml").read_text())
    data["topics"].append({"name": "reviewed_topic", "partitions": 4, "retention": "1d", "key": "team_id"})
    reg = tmp_path / "topics.yaml"
    reg.write_text(yaml.safe_dump(data))
    plan_file = tmp_path / "plan.json"
    assert cli(hip_cluster, "plan", "--registry", str(reg), "--out", str(plan_file))[0] == 2
    data["topics"][-1]["name"] = "unreviewed_topic"
    reg.write_text(yaml.safe_dump(data))
    code, output = cli(hip_cluster, "apply", "--registry", str(reg), "--plan", str(plan_file))
    assert code == 1 and "no longer gives the plan that was reviewed" in output, output
    topics = hip_cluster.admin_client().list_topics(timeout=10).topics
    assert "reviewed_topic" not in topics and "unreviewed_topic" not in topics


def test_partial_failure_applies_the_rest_and_rerun_converges(hip_cluster, registry, tmp_path):
    data = yaml.safe_load((ROOT / "topics.yaml").read_text())
    data["principals"].append({"name": "new-service"})
    data["topics"].append({"name": "new_service_events", "partitions": 4, "retention": "1d",
                           "key": "team_id", "producers": ["new-service"]})
    reg = tmp_path / "topics.yaml"
    reg.write_text(yaml.safe_dump(data))
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps(hip_cluster.creds.principals))  # new-service has no password
    code, output = cli(hip_cluster, "apply", "--registry", str(reg), "--secrets-file", str(secrets))
    assert code == 1 and "no password for new-service" in output
    assert "new_service_events" in hip_cluster.admin_client().list_topics(timeout=10).topics
    env_pw = {"HANZO_STREAM_PASSWORD_NEW_SERVICE": "a-new-password"}
    os.environ.update(env_pw)
    try:
        code, output = cli(hip_cluster, "apply", "--registry", str(reg), "--secrets-file", str(secrets))
        assert code == 0, output
        code, output = cli(hip_cluster, "plan", "--registry", str(reg), "--secrets-file", str(secrets))
        assert code == 0, output
    finally:
        os.environ.pop("HANZO_STREAM_PASSWORD_NEW_SERVICE")
    new = dataclasses.replace(hip_cluster.as_("admin"), username="new-service", password="a-new-password")
    from confluent_kafka import Producer

    p = Producer(new.confluent())
    errors = []
    p.produce("new_service_events", b"{}", key=b"t1", on_delivery=lambda e, m: errors.append(e))
    p.flush(20)
    assert errors == [None]


def test_validate_only_catches_what_the_broker_rejects(hip_cluster, registry, tmp_path):
    """Policy refuses a nonsense config before any cluster is asked; should a change ever get
    past policy, the brokers' validate-only pass still stops it at plan time."""
    data = yaml.safe_load((ROOT / "topics.yaml").read_text())
    data["topics"].append({"name": "bad_config_topic", "partitions": 4, "retention": "1d", "key": "team_id",
                           "config": {"max.message.bytes": "-5"}})
    reg = tmp_path / "topics.yaml"
    reg.write_text(yaml.safe_dump(data))
    code, output = cli(hip_cluster, "plan", "--registry", str(reg))
    assert code == 1 and "topics[bad_config_topic].config.max.message.bytes" in output
    assert "broker rejects" not in output  # refused before the cluster was asked

    bad = dataclasses.replace(registry.topics[0], name="bad_config_topic",
                              config={"max.message.bytes": "-5"})
    past_policy = dataclasses.replace(registry, topics=(*registry.topics, bad))
    p = reconcile_run.plan(hip_cluster.admin_client(), past_policy)
    assert any("broker rejects" in e and "bad_config_topic" in e for e in p.errors), p.errors
    assert "bad_config_topic" not in hip_cluster.admin_client().list_topics(timeout=10).topics


def test_three_brokers_create_rf3_topics(kafka_cluster3, registry):
    apply_registry(kafka_cluster3, registry)
    state = observe(kafka_cluster3.admin_client())
    assert {state.topics[t.name].replication_factor for t in registry.topics} == {3}
    assert state.topics["audit_log"].configs["min.insync.replicas"] == "2"


def test_passwords_never_reach_broker_logs(hip_cluster):
    if hip_cluster.local is None:
        pytest.skip("external cluster: its logs are not ours to read")
    secrets = [hip_cluster.creds.admin, *hip_cluster.creds.principals.values()]
    for log in hip_cluster.local.log_files():
        text = log.read_text()
        assert text, log
        assert not [s for s in secrets if s in text]


def test_validate_command(tmp_path):
    result = CliRunner().invoke(app, ["validate", "--registry", str(ROOT / "topics.yaml")])
    assert result.exit_code == 0, result.output
    reg = tmp_path / "topics.yaml"
    reg.write_text((ROOT / "topics.yaml").read_text().replace("partitions: 16", "partitions: 2"))
    result = CliRunner().invoke(app, ["validate", "--registry", str(reg)])
    assert result.exit_code == 1
    assert "topics[events_plugin_ingestion].partitions" in result.output
    assert load_registry(ROOT / "topics.yaml").topic("events_plugin_ingestion").partitions == 16


def _count_records(cluster: Cluster, topic: str) -> list[bytes]:
    """Every record value in the topic, read from the beginning by the admin."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(cluster.admin.confluent() | {"group.id": f"count-{topic}", "enable.auto.commit": False})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        values, at = [], dict.fromkeys(parts, 0)
        deadline = time.monotonic() + 60
        while any(at[p] < ends[p] for p in parts) and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and not m.error():
                values.append(m.value())
                at[m.partition()] = m.offset() + 1
        return values
    finally:
        c.close()


def test_replication_factor_grows_by_a_throttled_reassignment_that_resumes(kafka_cluster3, registry,
                                                                           tmp_path):
    """One registry line (`replication: {profile: cluster}`) raises a topic from RF 1 to the
    3-broker profile: plan shows the moves, apply is interrupted mid-way and re-run, and it ends
    with 3 in-sync replicas everywhere, no throttle, every record, min ISR 2 only at the end."""
    from confluent_kafka import Producer

    from hanzo_stream.reconcile import plan, reconcile
    from hanzo_stream.reconcile.changes import RaiseReplication
    from hanzo_stream.reconcile.replication import BROKER_RATES, TOPIC_THROTTLES

    # ~2 MiB per copy of the topic; the busiest leader serves ~2 MiB. Kafka lets a throttled
    # copy burst ~10 windows' worth (10 s x rate) first, so at 64 KiB/s it runs ~20 s: time to
    # interrupt, look, and resume while it still runs.
    name, records, throttle = "grow_me", 2000, 64 * 1024
    apply_registry(kafka_cluster3, registry)  # HIP converged first: the interrupt hits the move
    admin = kafka_cluster3.counting_admin()
    admin.create_topics([NewTopic(name, 4, 1, config={"min.insync.replicas": "1"})])[name].result()
    p = Producer(kafka_cluster3.admin.confluent() | {"acks": "all", "linger.ms": 20})
    for i in range(records):
        p.produce(name, f"{i:08d}".encode() + b"x" * 1016, key=str(i).encode())
    assert p.flush(60) == 0

    data = yaml.safe_load((ROOT / "topics.yaml").read_text())
    data["replication"] = {"profile": "cluster"}
    data["topics"].append({"name": name, "partitions": 4, "retention": "1d", "key": "team_id"})
    reg_file = tmp_path / "topics.yaml"
    reg_file.write_text(yaml.safe_dump(data))
    reg = load_registry(reg_file)

    code, output = cli(kafka_cluster3, "plan", "--registry", str(reg_file), "--throttle", str(throttle))
    assert code == 2, output
    assert f"topic {name}: replication factor 1 -> 3, 4 partition(s) move" in output, output
    assert "64.0 KiB/s per broker" in output and "min.insync.replicas -> 2 once" in output
    [planned] = plan(admin, reg, Options(throttle=throttle)).of(RaiseReplication)
    assert planned.bytes >= 2 * records * 1024  # every record, copied to two new replicas

    opts = Options(available_passwords=frozenset(kafka_cluster3.creds.principals), throttle=throttle)
    seen = []

    def interrupt(progress):
        seen.append(progress)
        raise KeyboardInterrupt  # Ctrl-C at the first progress report, as a person would

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        reconcile(admin, reg, dict(kafka_cluster3.creds.principals), opts, progress=interrupt)
    interrupted_at = time.monotonic() - started
    assert seen[0].partitions_done < seen[0].partitions == 4
    running = admin.list_reassignments()  # the controller's answer: authoritative
    assert {tp for tp in running if tp[0] == name}, "the move runs on without apply"
    # Each broker applies metadata a moment after the controller: wait for it to show.
    def throttled():
        t = observe(admin).topics[name]
        return t if set(TOPIC_THROTTLES) <= t.dynamic else None

    live = wait_for(throttled, 30, "the topic's throttled replicas")
    assert live.configs["min.insync.replicas"] == "1"  # not raised mid-move

    code, output = cli(kafka_cluster3, "plan", "--registry", str(reg_file), "--throttle", str(throttle))
    assert code == 2 and "resumes the running reassignment" in output, output

    resumed_at = time.monotonic() - started
    run = invoke(kafka_cluster3, "apply", "--registry", str(reg_file), "--throttle", str(throttle),
                 "--wait", "240", "--json")
    took = time.monotonic() - started
    assert run.exit_code == 0, run.output
    doc = json.loads(run.stdout)
    assert doc["failed"] == [] and doc["applied"] >= 1, doc
    assert "alter_partition_reassignments" not in doc["admin_calls"], doc  # resumed, none started
    assert doc["admin_calls"]["list_partition_reassignments"] >= 1
    assert re.search(r"replicas in sync: (\d+)/\1 partitions, ([\d.]+ \w+) of \2 copied", run.stderr), \
        run.stderr  # progress, on stderr beside the JSON, ending complete

    again = kafka_cluster3.counting_admin()

    def settled():
        state = observe(again)
        t = state.topics[name]
        return state if t.configs["min.insync.replicas"] == "2" and not set(TOPIC_THROTTLES) & t.dynamic \
            else None

    state = wait_for(settled, 30, "min ISR 2 and no throttle on every broker's metadata")
    t = state.topics[name]
    assert t.replication_factor == 3 and all(set(r) == {1, 2, 3} for r in t.replicas)
    assert all(set(isr) == {1, 2, 3} for isr in t.isr)
    for b in state.brokers:  # librdkafka: one broker resource per call
        [fut] = admin.describe_configs([ConfigResource(ResourceType.BROKER, str(b))]).values()
        cfg = fut.result()
        left = {k: cfg[k].value for k in BROKER_RATES
                if k in cfg and ConfigSource(cfg[k].source) == ConfigSource.DYNAMIC_BROKER_CONFIG}
        assert not left, (b, left)
    sizes = again.log_dir_sizes({name})
    for part in range(4):
        assert len({sizes[(name, part, b)] for b in (1, 2, 3)}) == 1  # every replica holds it all
    values = _count_records(kafka_cluster3, name)
    assert len(values) == records and len({v[:8] for v in values}) == records
    final = plan(again, reg, opts)
    again.close()
    admin.close()
    assert not final.changes and not final.errors, final.changes
    print(f"\nreplication 1 -> 3: {planned.bytes} bytes copied at {throttle} B/s per broker, "
          f"{took:.1f} s from the first apply to the end (interrupted at {interrupted_at:.1f} s, "
          f"resumed at {resumed_at:.1f} s)")


def test_client_quotas_are_applied_enforced_read_by_the_planner_and_removed(hip_cluster, tmp_path):
    """A principal's `quotas:` reach the broker: the plan shows them, apply sets them, the
    broker throttles a producer above its producer_byte_rate, the pull-request planner reads
    them (no diff), and taking them out of the registry takes them off the cluster."""
    from confluent_kafka import Producer

    rate = 64 * 1024  # bytes/s per broker
    data = yaml.safe_load((ROOT / "topics.yaml").read_text())
    data["principals"].append({"name": "quota-probe",
                               "quotas": {"producer_byte_rate": rate, "request_percentage": 200}})
    data["topics"].append({"name": "quota_probe", "partitions": 4, "retention": "1h",
                           "key": "team_id", "producers": ["quota-probe"]})
    reg = tmp_path / "topics.yaml"
    reg.write_text(yaml.safe_dump(data))
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps(hip_cluster.creds.principals | {"quota-probe": "quota-probe-pw-1"}))
    args = ("--registry", str(reg), "--secrets-file", str(secrets))
    counting = hip_cluster.counting_admin()
    try:
        code, output = cli(hip_cluster, "plan", "--json", *args)
        assert code == 2, output
        (quota,) = [c for c in json.loads(output)["changes"] if c["kind"] == "quota.user"]
        assert quota["target"] == "quota-probe" and quota["quotas"] == {
            "producer_byte_rate": {"before": None, "after": rate},
            "request_percentage": {"before": None, "after": 200}}
        code, output = cli(hip_cluster, "apply", *args)
        assert code == 0, output
        assert observe(counting).quotas["quota-probe"] == {"producer_byte_rate": rate,
                                                           "request_percentage": 200}
        code, output = cli(hip_cluster, "plan", *args, principal=platform.REGISTRY_PLANNER)
        assert code == 0, output  # read the quotas (DESCRIBE_CONFIGS on the cluster), no diff

        throttled_ms: list[int] = []
        conn = dataclasses.replace(hip_cluster.as_("admin"), username="quota-probe",
                                   password="quota-probe-pw-1")
        producer = Producer(conn.confluent() | {"statistics.interval.ms": 500, "stats_cb": lambda s: (
            throttled_ms.extend(b["throttle"]["max"] for b in json.loads(s)["brokers"].values()))})
        # A new client's rate is measured over the quota's whole window (quota.window.num - 1 =
        # 10 one-second samples), so its first 10 s worth pass unthrottled; 16 s worth takes ~6 s.
        record, total = os.urandom(16 * 1024), 16 * rate
        started = time.monotonic()
        for _ in range(total // len(record)):
            producer.produce("quota_probe", record, key=b"team_1")
            producer.poll(0)
        assert producer.flush(120) == 0
        took = time.monotonic() - started
        producer.poll(1)  # one more statistics report
        print(f"\n{total // 1024} KiB at a {rate // 1024} KiB/s quota: {took:.1f} s, broker "
              f"throttle up to {max(throttled_ms, default=0)} ms")
        assert took >= 3, took  # unthrottled it takes well under a second
        assert max(throttled_ms, default=0) > 0

        data["principals"][-1].pop("quotas")
        reg.write_text(yaml.safe_dump(data))
        code, output = cli(hip_cluster, "apply", *args)
        assert code == 0, output
        assert "quota-probe" not in observe(counting).quotas
        assert cli(hip_cluster, "plan", *args)[0] == 0
    finally:  # the session's broker outlives this module: no quota may stay behind
        counting.alter_user_quotas({"quota-probe": {k: None for k in ("producer_byte_rate",
                                                                      "request_percentage")}})
        counting.close()


def test_new_replicas_and_partitions_are_spread_over_the_brokers_racks(kafka_cluster3, registry, tmp_path):
    """Brokers 1 and 2 share zone-a, 3 is zone-b. Raising a topic's factor from 1 to 2, and
    growing it at factor 2, puts every partition in both zones: losing a zone keeps a copy.
    Placing by load alone would pair brokers of zone-a for some partitions, wherever Kafka
    put the first copies (the emptier broker of a partition's missing ones is often in its
    own zone)."""
    data = yaml.safe_load((ROOT / "topics.yaml").read_text())
    data["topics"].append({"name": "zoned", "partitions": 6, "retention": "1d", "key": "team_id",
                           "producers": ["llm-gateway"], "replication_factor": 1})
    reg = tmp_path / "topics.yaml"
    reg.write_text(yaml.safe_dump(data))
    apply_registry(kafka_cluster3, load_registry(reg))
    with kafka_cluster3.counting_admin() as counting:
        state = observe(counting)
    assert state.racks == RACKS
    # Kafka's controller placed these (one copy each; which brokers is its choice: a broker
    # it saw fenced a moment ago gets none). Load alone would pair brokers of one zone below.
    assert [len(reps) for reps in state.topics["zoned"].replicas] == [1] * 6

    data["topics"][-1]["replication_factor"] = 2
    reg.write_text(yaml.safe_dump(data))
    apply_registry(kafka_cluster3, load_registry(reg))
    data["topics"][-1]["partitions"] = 8
    reg.write_text(yaml.safe_dump(data))
    apply_registry(kafka_cluster3, load_registry(reg))

    replicas = observe(kafka_cluster3.admin_client()).topics["zoned"].replicas
    assert len(replicas) == 8
    for p, reps in enumerate(replicas):
        assert len(reps) == 2 and {RACKS[b] for b in reps} == {"zone-a", "zone-b"}, (p, replicas)
