"""topics.yaml: the HIP registry loads, and every policy rule has a passing and a failing case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hanzo_stream.registry import RegistryInvalid, load_registry
from hanzo_stream.registry.model import Acl, DeadLetterThresholds, LagThresholds

ROOT = Path(__file__).resolve().parents[2]


def hip() -> dict:
    return yaml.safe_load((ROOT / "topics.yaml").read_text())


def load(tmp_path: Path, data: dict):
    f = tmp_path / "topics.yaml"
    # through JSON: edits that share a list would otherwise be dumped as a YAML alias (refused)
    f.write_text(yaml.safe_dump(json.loads(json.dumps(data)), sort_keys=False))
    return load_registry(f)


def problems(tmp_path: Path, data: dict) -> list:
    with pytest.raises(RegistryInvalid) as e:
        load(tmp_path, data)
    return e.value.problems


def topic(data: dict, name: str) -> dict:
    return next(t for t in data["topics"] if t["name"] == name)


def group(data: dict, name: str) -> dict:
    return next(g for g in data["groups"] if g["name"] == name)


def test_hip_tables(registry):
    expected = {"events_plugin_ingestion": (16, 7, "team_id"), "llm_usage": (8, 14, "team_id"),
                "billing_events": (4, 30, "org_id"), "audit_log": (4, 90, "org_id"),
                "agent_rpc_metering": (8, 7, "agent_id"), "dead_letter": (1, 30, "source_topic"),
                # not in the HIP table: where rpc-billing's settlements go (issue 12)
                "agent_rpc_settlements": (4, 30, "agent_id")}
    got = {t.name: (t.partitions, t.retention_ms // 86_400_000, t.key) for t in registry.topics}
    assert got == expected
    groups = {g.name: (g.topics, g.consumers) for g in registry.groups}
    assert groups == {
        "analytics-ingest": (("events_plugin_ingestion",), 4), "billing-agg": (("llm_usage",), 2),
        "audit-archive": (("audit_log",), 1), "llm-metrics": (("llm_usage",), 2),
        "rpc-billing": (("agent_rpc_metering",), 2), "dead-letter-monitor": (("dead_letter",), 1),
        # the topic table's readers, under groups of their own names (issue 25)
        "compliance": (("audit_log",), 1), "commerce": (("billing_events",), 1),
        "reporting": (("billing_events",), 1)}
    assert all(t.managed_configs()["cleanup.policy"] == "delete" for t in registry.topics)


def test_hip_acls_are_least_privilege(registry):
    def ops(principal: str) -> set[tuple[str, str, str]]:
        return {(a.operation, a.resource_type, a.resource_name) for a in registry.acls()
                if a.principal == f"User:{principal}"}

    assert ("WRITE", "TOPIC", "events_plugin_ingestion") in ops("insights-capture")
    assert ops("llm-gateway") == {("WRITE", "TOPIC", "llm_usage"), ("DESCRIBE", "TOPIC", "llm_usage")}
    assert {("READ", "TOPIC", "llm_usage"), ("WRITE", "TOPIC", "billing_events"),
            ("READ", "GROUP", "billing-agg")} <= ops("billing-aggregator")
    assert ops("audit-archiver") == {("READ", "TOPIC", "audit_log"), ("DESCRIBE", "TOPIC", "audit_log"),
                                     ("READ", "GROUP", "audit-archive")}
    assert ops("*") == {("WRITE", "TOPIC", "dead_letter"), ("DESCRIBE", "TOPIC", "dead_letter")}
    assert ops("rpc-billing") == {  # reads its topic, commits its group, writes its settlements
        ("READ", "TOPIC", "agent_rpc_metering"), ("DESCRIBE", "TOPIC", "agent_rpc_metering"),
        ("READ", "GROUP", "rpc-billing"), ("WRITE", "TOPIC", "agent_rpc_settlements"),
        ("DESCRIBE", "TOPIC", "agent_rpc_settlements")}
    for reader, topic in [("compliance", "audit_log"), ("commerce", "billing_events"),
                          ("reporting", "billing_events")]:  # read, never write
        assert ops(reader) == {("READ", "TOPIC", topic), ("DESCRIBE", "TOPIC", topic),
                               ("READ", "GROUP", reader)}
    assert not any(a.operation == "ALL" for a in registry.acls())


def test_error_names_file_line_field_and_fix(tmp_path):
    data = hip()
    topic(data, "llm_usage")["partitions"] = 2
    [p] = problems(tmp_path, data)
    assert p.file.endswith("topics.yaml")
    text = (tmp_path / "topics.yaml").read_text().splitlines()
    assert "partitions: 2" in text[p.line - 1]
    assert p.field == "topics[llm_usage].partitions"
    assert "set partitions: 4" in p.fix
    assert str(p).startswith(f"{p.file}:{p.line}: topics[llm_usage].partitions:")


def test_all_problems_reported_at_once(tmp_path):
    data = hip()
    topic(data, "llm_usage")["name"] = "LlmUsage"
    group(data, "billing-agg")["name"] = "billing_agg"
    fields = {p.field for p in problems(tmp_path, data)}
    assert {"topics[LlmUsage].name", "groups[billing_agg].name"} <= fields


@pytest.mark.parametrize(("edit", "field", "fragment"), [
    (lambda d: topic(d, "llm_usage").update(name="llmUsage"), "name", "snake_case"),
    (lambda d: topic(d, "llm_usage").update(name="prod_llm_usage"), "name", "environment"),
    (lambda d: topic(d, "llm_usage").update(name="llm_usage_stg"), "name", "environment"),
    (lambda d: group(d, "billing-agg").update(name="billingAgg"), "name", "kebab-case"),
    (lambda d: group(d, "billing-agg").update(name="dev-billing-agg"), "name", "environment"),
    (lambda d: group(d, "billing-agg").update(name="billing-agg-v2"), "name", "version or instance"),
    (lambda d: group(d, "billing-agg").update(name="billing-agg-2"), "name", "version or instance"),
    (lambda d: group(d, "billing-agg").update(name="billing-agg-7f3a9c"), "name", "version or instance"),
    (lambda d: topic(d, "audit_log").update(partitions=3), "partitions", "guideline"),
    (lambda d: group(d, "analytics-ingest").update(consumers=20), "partitions", "idle"),
    (lambda d: topic(d, "audit_log").pop("retention"), "retention", "required"),
    (lambda d: topic(d, "audit_log").pop("key"), "key", "required"),
    (lambda d: topic(d, "audit_log").update(key="customer"), "key", "not an envelope field"),
    (lambda d: topic(d, "audit_log").update(retention="7 days"), "retention", "match"),
    (lambda d: topic(d, "llm_usage").update(producers=["ghost"]), "producers", "not a declared"),
    (lambda d: group(d, "billing-agg").update(principal="ghost"), "principal", "not declared"),
    (lambda d: group(d, "billing-agg").update(topics=["llm_usages"]), "topics", "does not exist"),
    (lambda d: topic(d, "llm_usage").update(producers=["*"]), "producers", "only dead_letter"),
    (lambda d: topic(d, "dead_letter").pop("exceptions"), "partitions", "guideline"),
    (lambda d: d.setdefault("acls", []).append(
        {"principal": "llm-gateway", "operations": ["ALL"], "topic": "llm_usage"}),
     "operations", "least privilege"),
    (lambda d: d.setdefault("acls", []).append(
        {"principal": "llm-gateway", "operations": ["READ"], "topic": "*"}), "acls", "wildcard"),
    (lambda d: d.setdefault("acls", []).append(
        {"principal": "ghost", "operations": ["READ"], "topic": "llm_usage"}), "principal", "not declared"),
    (lambda d: topic(d, "llm_usage").update(config={"cleanup.policy": "compact"}), "config",
     "no compaction"),
    (lambda d: topic(d, "llm_usage").update(colour="red"), "llm_usage", "Additional properties"),
    (lambda d: d["topics"].append(dict(topic(d, "llm_usage"))), "name", "declared 2 times"),
    (lambda d: group(d, "billing-agg").update(lag={"warning": 10, "critical": 5}), "lag", "below critical"),
    (lambda d: topic(d, "llm_usage").update(dead_letters={"warning": 10, "critical": 5}), "dead_letters",
     "not be above critical"),
    (lambda d: topic(d, "llm_usage").update(dead_letters={"warning": 0}), "warning", "minimum"),
    (lambda d: topic(d, "llm_usage").update(dead_letters={"page": 1}), "dead_letters", "Additional"),
    # A batch reader: runs an hour or more apart, no lag thresholds, well inside retention.
    (lambda d: group(d, "compliance").update(batch={"every": "30m"}), "batch.every", "continuous"),
    (lambda d: group(d, "compliance").update(lag={"warning": 10, "critical": 20}), "lag",
     "grows between runs"),
    (lambda d: group(d, "reporting").update(batch={"every": "25d"}), "batch.every",
     "billing_events keeps records for 30d"),
    (lambda d: group(d, "reporting").update(batch={"every": "1 day"}), "batch", "match"),
    (lambda d: group(d, "reporting").update(batch={}), "batch", "required"),
])
def test_policy_rule_refuses(tmp_path, edit, field, fragment):
    data = hip()
    edit(data)
    found = problems(tmp_path, data)
    assert any(field in p.field and fragment in p.message + p.fix for p in found), \
        "\n".join(map(str, found))


def _rename_llm_usage(d: dict) -> None:
    topic(d, "llm_usage").update(name="llm_usage_v2")
    for reader in ("billing-agg", "llm-metrics"):
        group(d, reader).update(topics=["llm_usage_v2"])


def _grants(principal: str, name: str, *ops: str) -> set[Acl]:
    return {Acl(f"User:{principal}", "TOPIC", name, "LITERAL", op) for op in ops}


def _moved_to_v2() -> tuple[set[Acl], set[Acl]]:
    """The ACLs a rename of llm_usage adds and removes: the same grants, on the new name."""
    users = {"llm-gateway": "WRITE", "billing-aggregator": "READ", "llm-metrics": "READ"}
    added, removed = (set().union(*(_grants(who, name, op, "DESCRIBE") for who, op in users.items()))
                      for name in ("llm_usage_v2", "llm_usage"))
    return added, removed


DAY = 86_400_000
ACCEPTED = {  # edit, what it changes in the loaded registry, and to what
    "growing partitions": (lambda d: topic(d, "llm_usage").update(partitions=64),
                           lambda r: r.topic("llm_usage").partitions, 64),
    "a renamed topic and its readers": (
        _rename_llm_usage,
        lambda r: ([t.name for t in r.topics if t.name.startswith("llm_usage")],
                   r.group("billing-agg").topics, r.group("llm-metrics").topics),
        (["llm_usage_v2"], ("llm_usage_v2",), ("llm_usage_v2",))),
    "a short retention": (lambda d: topic(d, "audit_log").update(retention="36h"),
                          lambda r: r.topic("audit_log").managed_configs()["retention.ms"],
                          str(36 * 3_600_000)),
    "an allowed config": (lambda d: topic(d, "audit_log").update(config={"max.message.bytes": 2097152}),
                          lambda r: r.topic("audit_log").managed_configs().get("max.message.bytes"),
                          "2097152"),
    "an extra grant": (lambda d: d.setdefault("acls", []).append(
        {"principal": "llm-metrics", "operations": ["DESCRIBE_CONFIGS"], "topic": "llm_usage"}),
        lambda r: [(g.principal, g.operations) for g in r.extra_grants],
        [("llm-metrics", ("DESCRIBE_CONFIGS",))]),
    "lag thresholds": (lambda d: group(d, "billing-agg").update(lag={"warning": 5000, "critical": 50000}),
                       lambda r: r.group("billing-agg").lag, LagThresholds(5000, 50000)),
    "4 partitions for 2 consumers, max(4, 4)": (
        lambda d: topic(d, "agent_rpc_metering").update(partitions=4),
        lambda r: r.topic("agent_rpc_metering").partitions, 4),
    "equal dead-letter thresholds (pages at once)": (
        lambda d: topic(d, "llm_usage").update(dead_letters={"warning": 3, "critical": 3}),
        lambda r: r.topic("llm_usage").dead_letters, DeadLetterThresholds(3, 3)),
    "a batch every 23d, 28.75d overdue < 30d retention": (
        lambda d: group(d, "reporting").update(batch={"every": "23d"}),
        lambda r: (r.group("reporting").batch_every_ms, r.group("reporting").batch_overdue_ms),
        (23 * DAY, int(23 * DAY * 1.25))),
    "an hourly batch": (lambda d: group(d, "reporting").update(batch={"every": "1h"}),
                        lambda r: r.group("reporting").batch_every_ms, 3_600_000),
    "a continuous reader again": (lambda d: group(d, "reporting").pop("batch"),
                                  lambda r: r.group("reporting").batch_every_ms, None),
}
#: What each accepted edit adds to and removes from the ACLs the reconciler applies.
ACL_DELTA = {
    "a renamed topic and its readers": _moved_to_v2(),
    "an extra grant": (_grants("llm-metrics", "llm_usage", "DESCRIBE_CONFIGS"), set()),
}


@pytest.mark.parametrize("name", list(ACCEPTED))
def test_policy_rule_accepts(tmp_path, registry, name):
    """Accepted, and kept as written: the loaded registry holds the edited value where the
    shipped one did not, and its ACLs change by exactly the grants the edit implies."""
    edit, observe, expected = ACCEPTED[name]
    data = hip()
    edit(data)
    edited = load(tmp_path, data)
    assert observe(edited) == expected != observe(registry)
    added, removed = ACL_DELTA.get(name, (set(), set()))
    assert (edited.acls() - registry.acls(), registry.acls() - edited.acls()) == (added, removed)


def test_bad_yaml_names_the_line(tmp_path):
    f = tmp_path / "topics.yaml"
    f.write_text("version: 1\ntopics: [\n  - name: x\n")
    with pytest.raises(RegistryInvalid) as e:
        load_registry(f)
    assert e.value.problems[0].line >= 2
    assert "YAML" in e.value.problems[0].message


def test_replication_profile_is_read_and_unknown_profiles_refused(tmp_path):
    data = hip()
    assert load(tmp_path, data).replication_profile is None  # replication not managed
    data["replication"] = {"profile": "cluster"}
    assert load(tmp_path, data).replication_profile == "cluster"
    data["replication"] = {"profile": "triple"}
    [p] = problems(tmp_path, data)
    assert p.field == "replication.profile" and "cluster, single, ha" in p.fix


def test_min_isr_and_throttles_are_not_registry_configs(tmp_path):
    data = hip()
    topic(data, "llm_usage")["config"] = {"min.insync.replicas": 2,
                                          "leader.replication.throttled.replicas": "*"}
    found = {p.field: p.fix for p in problems(tmp_path, data)}
    assert "replication profile" in found["topics[llm_usage].config.min.insync.replicas"]
    assert "moves replicas" in found["topics[llm_usage].config.leader.replication.throttled.replicas"]


def test_a_versioned_group_name_is_refused_with_the_name_to_use(tmp_path):
    data = hip()
    group(data, "billing-agg")["name"] = "billing-agg-v2"
    (p,) = [p for p in problems(tmp_path, data) if "version or instance" in p.message]
    assert p.field == "groups[billing-agg-v2].name" and "'billing-agg'" in p.fix


def test_quotas_are_read_in_kafkas_words(tmp_path):
    data = hip()
    data["principals"][1]["quotas"] = {"producer_byte_rate": 1048576, "request_percentage": 25}
    reg = load(tmp_path, data)
    p = next(p for p in reg.principals if p.name == data["principals"][1]["name"])
    assert p.quotas == (("producer_byte_rate", 1048576.0), ("request_percentage", 25.0))
    assert all(q.quotas == () for q in reg.principals if q is not p)


@pytest.mark.parametrize(("quotas", "field", "fix"), [
    ({"producer_rate": 1048576}, "quotas", "allowed keys: consumer_byte_rate, controller_mutation_rate"),
    ({"producer_byte_rate": 100}, "quotas.producer_byte_rate", "at least 1024"),
    ({"consumer_byte_rate": "10MB"}, "quotas.consumer_byte_rate", "of type integer"),
    ({"request_percentage": 0}, "quotas.request_percentage", "above 0"),
    ({}, "quotas", "at least one key"),
])
def test_a_bad_quota_names_the_principal_the_key_and_the_fix(tmp_path, quotas, field, fix):
    data = hip()
    name = data["principals"][1]["name"]
    data["principals"][1]["quotas"] = quotas
    (p,) = problems(tmp_path, data)
    assert p.file.endswith("topics.yaml") and p.line > 1
    assert p.field == f"principals[{name}].{field}", p
    assert fix in p.fix, p


def _in_days(n: int) -> str:
    from datetime import UTC, datetime, timedelta

    return (datetime.now(UTC).date() + timedelta(days=n)).isoformat()


def test_a_legacy_window_gives_anonymous_plaintext_clients_exactly_what_they_stand_in_for(tmp_path):
    from hanzo_stream.registry import access

    data = hip()
    data["legacy_plaintext"] = {"stands_in_for": ["llm-gateway", "billing-aggregator"],
                                "until": _in_days(30)}
    reg = load(tmp_path, data)
    acls = reg.acls()
    plain = load(tmp_path, hip()).acls()
    assert acls - plain == {a.__class__(**{**a.__dict__, "principal": "User:ANONYMOUS"})
                            for a in plain if a.principal in ("User:llm-gateway",
                                                              "User:billing-aggregator")}
    assert access.allows(acls, "ANONYMOUS", "TOPIC", "llm_usage", "WRITE")
    assert access.allows(acls, "ANONYMOUS", "GROUP", "billing-agg", "READ")
    assert not access.allows(acls, "ANONYMOUS", "TOPIC", "audit_log", "WRITE")
    assert "User:ANONYMOUS" in reg.owned_principals()  # so removing the block removes its ACLs
    assert "User:ANONYMOUS" in load(tmp_path, hip()).owned_principals()
    from hanzo_stream.reconcile.observe import ClusterState
    from hanzo_stream.reconcile.plan import make_plan

    state = ClusterState(topics={}, acls=plain, scram_users={}, brokers=(1,), quotas={})
    open_plan = make_plan(reg, state)
    assert any("stand in for llm-gateway, billing-aggregator until" in n for n in open_plan.notes)
    closed = make_plan(load(tmp_path, hip()), ClusterState(topics={}, acls=acls, scram_users={},
                                                           brokers=(1,), quotas={}))
    removed = {c.acl for c in closed.changes if c.KIND == "acl.delete"}
    assert removed == acls - plain  # closing the window removes exactly its ACLs


def test_an_unquoted_date_is_a_date(tmp_path):
    text = (ROOT / "topics.yaml").read_text() + (
        f"legacy_plaintext:\n  stands_in_for: [llm-gateway]\n  until: {_in_days(10)}\n")
    f = tmp_path / "topics.yaml"
    f.write_text(text)
    assert load_registry(f).legacy.until.isoformat() == _in_days(10)


@pytest.mark.parametrize(("block", "field", "fix"), [
    ({"stands_in_for": ["llm-gateway"], "until": _in_days(-1)}, "legacy_plaintext.until",
     "remove legacy_plaintext: and the LEGACY listener"),
    ({"stands_in_for": ["llm-gateway"], "until": _in_days(400)}, "legacy_plaintext.until",
     "set an earlier date"),
    ({"stands_in_for": ["llm-gateway"], "until": "next spring"}, "legacy_plaintext.until",
     "YYYY-MM-DD"),
    ({"stands_in_for": ["ghost"], "until": _in_days(10)}, "legacy_plaintext.stands_in_for[0]",
     "name a principal of principals:"),
    ({"stands_in_for": [], "until": _in_days(10)}, "legacy_plaintext.stands_in_for",
     "at least 1"),
])
def test_a_legacy_window_must_end_and_name_real_principals(tmp_path, block, field, fix):
    data = hip()
    data["legacy_plaintext"] = block
    (p,) = problems(tmp_path, data)
    assert p.field == field, p
    assert fix in p.fix or fix in p.message, p
