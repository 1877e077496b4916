"""The CrossGuard-style policy: the rendered stacks pass it, and each rule catches the
violation it exists for, both over rendered output and inside the program."""

from __future__ import annotations

import copy
import json

import pytest

from infra import policy

from .infra_helpers import RenderFailed, manifests, render


@pytest.fixture(scope="module", params=["dev", "prod"])
def rendered(request):
    return render(request.param)


def env_of(ms: list[dict]) -> list[dict]:
    sts = next(m for m in ms if m["kind"] == "StatefulSet")
    return sts["spec"]["template"]["spec"]["containers"][0]["env"]


def rules(violations: list[policy.Violation]) -> set[str]:
    return {v.rule for v in violations}


def test_rendered_stacks_pass_with_every_generated_secret_searched(rendered):
    secrets = rendered["generated_secrets"]
    assert len(secrets) >= 13  # 11 passwords, two private keys (the cluster id is not a secret)
    env = "prod" if rendered["stack"] == "prod" else "dev"
    assert policy.check(manifests(rendered), env, secret_values=secrets) == []


def test_secrets_appear_only_inside_secret_objects(rendered):
    """The plain-text scan, done independently: each generated value occurs in Secret
    data and nowhere else in what would be sent to the cluster."""
    delivered = set()
    for value in rendered["generated_secrets"]:
        holders = [m for m in manifests(rendered) if json.dumps(value)[1:-1] in json.dumps(m)]
        assert {m["kind"] for m in holders} <= {"Secret"}
        if holders:
            delivered.add(value)
    outs = rendered["outputs"]
    must = {outs["adminPassword"]["value"], *outs["principalPasswords"]["value"].values()}
    assert must <= delivered  # the CA key, by contrast, never leaves Pulumi state


def test_prod_replication_rules():
    ms = copy.deepcopy(manifests(render("prod")))
    sts = next(m for m in ms if m["kind"] == "StatefulSet")
    sts["spec"]["replicas"] = 1
    for e in env_of(ms):
        if e["name"] == "KAFKA_MIN_INSYNC_REPLICAS":
            e["value"] = "1"
        if e["name"] == "KAFKA_DEFAULT_REPLICATION_FACTOR":
            e["value"] = "2"
    found = policy.check_replication(ms, "prod")
    assert {v.message for v in found} >= {
        "prod needs 3 or more brokers", "min.insync.replicas must be >= 2 in prod",
        "default.replication.factor must be >= 3 in prod"}
    assert policy.check_replication(ms, "dev") == []  # dev may run one broker


def test_dev_stack_would_fail_prod_policy():
    assert rules(policy.check(manifests(render("dev")), "prod")) == {"prod-replication"}


@pytest.mark.parametrize(("image", "digest_required", "bad"), [
    ("docker.io/apache/kafka:4.4.0", False, False),
    ("docker.io/apache/kafka:latest", False, True),
    ("docker.io/apache/kafka", False, True),
    ("registry:5000/kafka", False, True),
    ("registry:5000/kafka:4.4.0", False, False),
    ("docker.io/apache/kafka:4.4.0", True, True),
    ("docker.io/apache/kafka:4.4.0@sha256:" + "a" * 64, True, False),
    ("docker.io/apache/kafka@sha256:" + "a" * 64, True, False),
    ("", False, True),
])
def test_image_pinning(image, digest_required, bad):
    assert (policy.image_problem(image, digest_required) is not None) is bad


def test_unpinned_image_anywhere_is_caught(rendered):
    ms = copy.deepcopy(manifests(rendered))
    driver = next(m for m in ms if m["kind"] == "Deployment" and m["spec"]["template"]["metadata"][
        "labels"].get("hanzo.ai/spark-role") == "driver")
    driver["spec"]["template"]["spec"]["containers"][0]["image"] = "apache/spark-py:latest"
    job = next(m for m in ms if m["kind"] == "Job")
    job["spec"]["template"]["spec"]["containers"][0]["image"] = "ghcr.io/hanzoai/hanzo-stream"
    found = policy.check_images(ms, False)
    assert {v.resource for v in found} == {f"Deployment/{driver['metadata']['name']}",
                                           f"Job/{job['metadata']['name']}"}


def test_plaintext_listener_is_caught(rendered):
    ms = copy.deepcopy(manifests(rendered))
    for e in env_of(ms):
        if e["name"] == "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":
            e["value"] = e["value"].replace("CLIENT:SASL_SSL", "CLIENT:PLAINTEXT")
    assert [v.message for v in policy.check_listeners(ms)] == ["listener CLIENT uses PLAINTEXT"]
    ms = copy.deepcopy(manifests(rendered))
    for e in env_of(ms):
        if e["name"] == "KAFKA_LISTENERS":
            e["value"] += ",EXTERNAL://0.0.0.0:9092"
    assert "EXTERNAL" in policy.check_listeners(ms)[0].message


def test_client_without_tls_is_caught(rendered):
    ms = copy.deepcopy(manifests(rendered))
    job = next(m for m in ms if m["kind"] == "Job")
    for e in job["spec"]["template"]["spec"]["containers"][0]["env"]:
        if e["name"] == "HANZO_STREAM_SECURITY_PROTOCOL":
            e["value"] = "SASL_PLAINTEXT"
    assert rules(policy.check_listeners(ms)) == {"no-plaintext"}


def test_missing_network_policy_is_caught(rendered):
    ms = [m for m in manifests(rendered) if m["kind"] != "NetworkPolicy"]
    found = policy.check_network_policies(ms)
    assert "no default-deny policy" in {v.message for v in found}
    assert any(v.resource == "StatefulSet/kafka" for v in found)
    ms = copy.deepcopy(manifests(rendered))
    dep = next(m for m in ms if m["kind"] == "Deployment")
    del dep["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/part-of"]
    assert len(policy.check_network_policies(ms)) == 1


def test_secret_in_plain_text_is_caught(rendered):
    secret = rendered["outputs"]["adminPassword"]["value"]
    ms = copy.deepcopy(manifests(rendered))
    cm = next(m for m in ms if m["kind"] == "ConfigMap")
    cm["data"]["leak"] = f"password={secret}"
    job = next(m for m in ms if m["kind"] == "Job")
    job["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "HANZO_STREAM_SASL_PASSWORD", "value": secret})
    found = policy.check_plain_text(ms, rendered["generated_secrets"])
    assert {v.resource for v in found} == {f"ConfigMap/{cm['metadata']['name']}",
                                           f"Job/{job['metadata']['name']}"}
    key = next(s for s in rendered["generated_secrets"] if "PRIVATE KEY" in s)
    ann = next(m for m in ms if m["kind"] == "StatefulSet")["metadata"]
    ann["annotations"] = {"debug": key}  # multi-line values are found as JSON text too
    assert any(v.resource == "StatefulSet/kafka" for v in policy.check_plain_text(
        ms, rendered["generated_secrets"]))


def test_program_refuses_a_prod_stack_that_breaks_policy():
    with pytest.raises(RenderFailed, match=r"prod-replication.*3 or more brokers"):
        render("prod", (("brokers", "1"),))
    with pytest.raises(RenderFailed, match=r"images-pinned"):
        render("prod", (("schemaRegistryImage", "confluentinc/cp-schema-registry:latest"),))
    with pytest.raises(RenderFailed, match=r"images-pinned.*not pinned by digest"):
        render("prod", (("requireDigests", "true"),))


def test_program_refuses_secret_settings_given_in_plain_text():
    with pytest.raises(RenderFailed, match=r"config set --secret clickhousePassword"):
        render("dev", (("clickhousePassword", "hunter2hunter2"),))


def test_secret_settings_become_secrets_and_nothing_else():
    values = {"s3AccessKey": "AKIAEXAMPLEKEY01", "s3SecretKey": "s3-secret-value-0123456789",
              "clickhousePassword": "clickhouse-pass-0123456789"}
    out = render("dev", secrets=tuple(values.items()))
    s3 = next(r for r in out["resources"] if r["inputs"].get("kind") == "Secret"
              and r["inputs"]["metadata"]["name"] == "hanzo-stream-s3")
    assert s3["inputs"]["stringData"] == {"access-key": values["s3AccessKey"],
                                          "secret-key": values["s3SecretKey"]}
    assert s3["secret_paths"] == ["stringData"]
    assert policy.check_plain_text(manifests(out), list(values.values())) == []
    driver = next(m for m in manifests(out) if m["kind"] == "Deployment" and m["spec"]["template"][
        "metadata"]["labels"].get("hanzo.ai/spark-role") == "driver")
    env = {e["name"]: e for e in driver["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "hanzo-stream-s3"


def test_the_postgres_dsn_reaches_only_the_settlement_jobs_and_only_from_its_secret():
    dsn = "postgresql://hanzo_billing:pg-pass-0123456789@billing-db.hanzo:5432/hanzo"
    for secrets in ((), (("postgresDsn", dsn),)):
        out = render("dev", secrets=secrets)
        pg = [m for m in manifests(out) if m["kind"] == "Secret"
              and m["metadata"]["name"] == "hanzo-stream-postgres"]
        assert [m["stringData"] for m in pg] == ([{"dsn": dsn}] if secrets else [])
        assert policy.check_plain_text([m for m in manifests(out) if m["kind"] != "Secret"], [dsn]) == []
        drivers = {m["metadata"]["name"]: m for m in manifests(out) if m["kind"] == "Deployment"
                   and m["spec"]["template"]["metadata"]["labels"].get("hanzo.ai/spark-role") == "driver"}
        with_dsn = set()
        for name, d in drivers.items():
            env = {e["name"]: e for e in d["spec"]["template"]["spec"]["containers"][0]["env"]}
            if "HANZO_STREAM_POSTGRES_DSN" in env:
                ref = env["HANZO_STREAM_POSTGRES_DSN"]["valueFrom"]["secretKeyRef"]
                assert ref == {"name": "hanzo-stream-postgres", "key": "dsn", "optional": True}
                with_dsn.add(name)
        assert {n.removesuffix("-driver") for n in with_dsn} == {"billing-agg", "rpc-billing"}, with_dsn


def test_unknown_setting_is_refused():
    with pytest.raises(RenderFailed, match="unknown setting 'hanzo-stream:broker'"):
        render("dev", (("broker", "3"),))


def test_the_restart_cronjobs_pods_are_held_to_the_same_rules():
    """A CronJob's pods (kafka-restart, infra/roller.py) are pods like any other: pinned
    images, TLS, the default deny."""
    ms = copy.deepcopy(manifests(render("prod")))
    (cron,) = [m for m in ms if m["kind"] == "CronJob"]
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]
    assert policy.check(ms, "prod") == []
    pod["spec"]["containers"][0]["image"] = "ghcr.io/hanzoai/hanzo-stream:latest"
    del pod["metadata"]["labels"]["app.kubernetes.io/part-of"]
    assert {(v.rule, v.resource) for v in policy.check(ms, "prod")} == {
        ("images-pinned", "CronJob/kafka-restart"), ("networkpolicy", "CronJob/kafka-restart")}
