"""The reconciler against a real KRaft broker with SASL_SSL and the StandardAuthorizer."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from typer.testing import CliRunner

from hanzo_stream.cli import app
from hanzo_stream.reconcile import CountingAdmin, Options, execute, make_plan, observe
from hanzo_stream.registry import load_registry
from hanzo_stream.registry.model import Acl

from .conftest import Cluster, apply_registry

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def cli(cluster: Cluster, *args: str, principal: str = "admin") -> tuple[int, str]:
    conn = cluster.as_(principal)
    env = {k: v for k, v in (line.split(" ", 1)[1].split("=", 1)
                             for line in conn.env_exports().splitlines())}
    env = {k: v.strip("'") for k, v in env.items()}
    result = CliRunner().invoke(app, list(args), env=env)
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
    assert sum(admin.calls.values()) == 4  # list_topics, describe_configs, describe_acls, scram


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

    plan = make_plan(registry, observe(admin), Options(available_passwords=frozenset()))
    described = sorted(f"{c.symbol} {c.describe()}" for c in plan.changes)
    assert described == [
        "+ User:llm-gateway ALLOW WRITE on topic llm_usage",
        "- User:llm-gateway ALLOW READ on topic audit_log",
        f"~ topic audit_log: retention.ms: 3600000 -> {90 * 86_400_000}",
    ]
    assert any("not-in-registry" in n for n in plan.notes)
    result = execute(CountingAdmin(admin), plan, {})
    assert result.ok
    state = observe(admin)
    assert state.topics["audit_log"].configs["retention.ms"] == str(90 * 86_400_000)
    assert state.topics["audit_log"].configs["segment.bytes"] == "16777216"  # left alone
    assert Acl("User:not-in-registry", "TOPIC", "audit_log", "LITERAL", "READ") in state.acls
    assert make_plan(registry, state, Options(available_passwords=frozenset())).changes == []


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
    plan = make_plan(registry, observe(admin), Options())
    assert not plan.by_kind("topic.delete") and "stray_one" in " ".join(plan.notes)
    capped = make_plan(registry, observe(admin), Options(allow_delete=True, max_deletions=0))
    assert capped.exit_code == 1
    allowed = make_plan(registry, observe(admin), Options(allow_delete=True, max_deletions=1))
    assert [c.target for c in allowed.by_kind("topic.delete")] == ["stray_one"]
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
    data = yaml.safe_load((ROOT / "topics.yaml").read_text())
    data["topics"].append({"name": "bad_config_topic", "partitions": 4, "retention": "1d", "key": "team_id",
                           "config": {"max.message.bytes": "-5"}})
    reg = tmp_path / "topics.yaml"
    reg.write_text(yaml.safe_dump(data))
    code, output = cli(hip_cluster, "plan", "--registry", str(reg))
    assert code == 1 and "broker rejects" in output and "bad_config_topic" in output
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
