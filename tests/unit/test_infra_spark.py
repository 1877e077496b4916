"""Spark jobs: one driver per consumer-group job, each as its own principal, launched by
spark-submit from a Deployment (default) or as a Spark operator SparkApplication."""

from __future__ import annotations

import yaml

from hanzo_stream.registry import load_registry
from infra import spark
from infra.reconciler import content_hash
from infra.settings import parse

from .infra_helpers import ROOT, of_kind, render, resource

REGISTRY = load_registry(ROOT / "topics.yaml")


def expected_jobs() -> list[str]:
    """Every spec that is a Spark job (`runtime: consumer` ones are Deployments)."""
    d = ROOT / "consumers"
    if not d.is_dir():
        return sorted(spark.DEFAULT_JOBS)
    return sorted(p.stem for p in d.glob("*.yaml")
                  if yaml.safe_load(p.read_text()).get("runtime", "spark") == "spark")


def test_one_application_per_job_with_image_checkpoint_connector_and_credentials():
    out = render("prod", (("sparkLauncher", "operator"),))
    apps = {a["metadata"]["name"]: a for a in of_kind(out, "SparkApplication")}
    assert sorted(apps) == expected_jobs()
    assert out["outputs"]["sparkApplications"]["value"] == [j.name for j in
                                                            spark.discover(ROOT, REGISTRY)]
    for name, app in apps.items():
        g = REGISTRY.group(name)
        spec = app["spec"]
        assert spec["image"] == "ghcr.io/hanzoai/hanzo-stream-spark:0.1.0"
        assert spec["restartPolicy"]["type"] == "Always"
        assert spec["mainApplicationFile"].startswith("local:///opt/hanzo-stream/spark/")
        jars = spec["deps"]["jars"]
        assert any("spark-sql-kafka-0-10_2.13-4.2.0.jar" in j for j in jars)
        assert any("kafka-clients-" in j for j in jars)
        assert spec["executor"]["instances"] == g.consumers
        for part in ("driver", "executor"):
            env = {e["name"]: e for e in spec[part]["env"]}
            assert env["HANZO_STREAM_CHECKPOINT"]["value"].startswith(
                f"s3a://hanzo-stream/checkpoints/{name}")
            assert env["HANZO_STREAM_GROUP"]["value"] == g.name
            ref = env["HANZO_STREAM_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"]
            assert ref == {"name": f"kafka-user-{g.principal}", "key": "password"}
            assert env["HANZO_STREAM_SASL_MECHANISM"]["value"] == "SCRAM-SHA-512"
            assert env["HANZO_STREAM_SECURITY_PROTOCOL"]["value"] == "SASL_SSL"
        deps = resource(out, "SparkApplication", name)["dependencies"]
        assert any(d.startswith("job-hanzo-stream-apply-") for d in deps)  # users exist first


def _drivers(out: dict) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in of_kind(out, "Deployment")
            if d["spec"]["template"]["metadata"]["labels"].get("hanzo.ai/spark-role") == "driver"}


def test_by_default_each_job_is_a_driver_deployment_running_spark_submit_in_client_mode():
    out = render("prod")
    assert not of_kind(out, "SparkApplication")
    drivers = _drivers(out)
    assert sorted(drivers) == expected_jobs()
    for name, d in drivers.items():
        g = REGISTRY.group(name)
        assert d["spec"]["replicas"] == 1
        assert d["spec"]["strategy"] == {"type": "Recreate"}  # never two drivers on one checkpoint
        pod = d["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == "spark" and pod["automountServiceAccountToken"] is True
        (c,) = pod["containers"]
        assert c["image"] == "ghcr.io/hanzoai/hanzo-stream-spark:0.1.0"
        assert c["command"] == ["spark-submit"]
        args = c["args"]
        conf = dict(a.split("=", 1) for a in args[args.index("--conf") + 1::2] if "=" in a)
        assert args[:4] == ["--master", "k8s://https://kubernetes.default.svc.cluster.local:443",
                            "--deploy-mode", "client"]
        assert args[-1] == f"/opt/hanzo-stream/{spark.discover(ROOT, REGISTRY)[0].entry}" or \
            args[-1].startswith("/opt/hanzo-stream/spark/")
        assert conf["spark.executor.instances"] == str(g.consumers)
        assert conf["spark.driver.host"] == "$(POD_IP)"
        assert conf["spark.kubernetes.driver.pod.name"] == "$(POD_NAME)"  # executors owned by it
        assert conf["spark.kubernetes.executor.podNamePrefix"] == "$(POD_NAME)"  # unique per driver
        assert conf["spark.kubernetes.driver.connectionTimeout"] == "60000"  # a busy node's API
        assert conf["spark.kubernetes.driver.requestTimeout"] == "60000"
        assert conf["spark.kubernetes.container.image"] == c["image"]
        env = {e["name"]: e for e in c["env"]}
        assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
        assert env["HANZO_STREAM_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
            "name": f"kafka-user-{g.principal}", "key": "password"}
        template = yaml.safe_load(next(
            m for m in of_kind(out, "ConfigMap") if m["metadata"]["name"] == f"{name}-executor-template"
        )["data"]["executor.yaml"])
        (ec,) = template["spec"]["containers"]
        assert ec["name"] == conf["spark.kubernetes.executor.podTemplateContainerName"]
        assert {e["name"] for e in ec["env"]} >= {"HANZO_STREAM_CHECKPOINT", "HANZO_STREAM_CA_FILE"}
        assert template["spec"]["securityContext"]["runAsNonRoot"] is True
        deps = resource(out, "Deployment", name)["dependencies"]
        assert any(dep.startswith("job-hanzo-stream-apply-") for dep in deps)  # users exist first


def test_a_stack_can_cap_executors_and_size_the_driver():
    out = render("dev", (("sparkMaxExecutors", "1"), ("sparkDriverMemory", "768m")))
    for d in _drivers(out).values():
        (c,) = d["spec"]["template"]["spec"]["containers"]
        assert "spark.executor.instances=1" in c["args"]
        assert c["args"][c["args"].index("--driver-memory") + 1] == "768m"
        assert c["resources"]["limits"]["memory"] == f"{768 + 384}Mi"


def test_java_options_reach_every_jvm_of_the_stack_and_none_when_unset():
    """The local Kubernetes stacks start their JVMs with C1 only (hanzo_stream/artifacts/jvm.py); a
    stack that never sets javaOptions renders the pods it always did, so nothing rolls."""
    from .infra_helpers import env_map, join_container, kafka_container

    opts = "-XX:TieredStopAtLevel=1"
    out = render("prod", (("javaOptions", opts),))
    assert env_map(kafka_container(out))["KAFKA_OPTS"] == {"name": "KAFKA_OPTS", "value": opts}
    assert env_map(join_container(out))["KAFKA_OPTS"]["value"] == opts
    for d in _drivers(out).values():
        (c,) = d["spec"]["template"]["spec"]["containers"]
        assert f"spark.driver.extraJavaOptions={opts}" in c["args"]
        assert f"spark.executor.extraJavaOptions={opts}" in c["args"]
    plain = render("prod")
    assert "KAFKA_OPTS" not in env_map(kafka_container(plain))
    assert "KAFKA_OPTS" not in env_map(join_container(plain))
    for d in _drivers(plain).values():
        (c,) = d["spec"]["template"]["spec"]["containers"]
        assert not any("extraJavaOptions" in a for a in c["args"])


def test_the_local_kubernetes_stacks_take_the_local_jit(monkeypatch):
    from hanzo_stream.kube import deploy

    assert deploy.local_jvm() == {"javaOptions": "-XX:TieredStopAtLevel=1"}
    monkeypatch.setenv("HANZO_STREAM_LOCAL_JIT", "full")
    assert deploy.local_jvm() == {"javaOptions": ""}


def test_a_driver_keeps_its_embedded_sink_on_a_claim_of_its_own():
    """analytics-ingest's chDB lives in the driver's files while its checkpoint is on shared
    storage: on the pod's disk a restarted driver resumed after the rows it had lost."""
    out = render("dev")
    claims = {c["metadata"]["name"]: c for c in of_kind(out, "PersistentVolumeClaim")
              if c["metadata"]["name"].endswith("-state")}
    assert sorted(claims) == ["analytics-ingest-state"]  # the one job with an embedded sink
    assert claims["analytics-ingest-state"]["spec"]["accessModes"] == ["ReadWriteOnce"]
    for name, d in _drivers(out).items():
        pod = d["spec"]["template"]["spec"]
        (c,) = pod["containers"]
        home = next(e["value"] for e in c["env"] if e["name"] == "HANZO_STREAM_HOME")
        mounted = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        claimed = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]
                   if "persistentVolumeClaim" in v}
        if name == "analytics-ingest":
            assert claimed == {mounted[home]: "analytics-ingest-state"}
        else:
            assert home not in mounted and not claimed
    # With a ClickHouse server the rows live there: no claim.
    served = render("dev", (("clickhouseUrl", "http://clickhouse.hanzo:8123"),))
    assert not [c for c in of_kind(served, "PersistentVolumeClaim")
                if c["metadata"]["name"].endswith("-state")]


def test_jvm_sizes_become_kubernetes_quantities():
    assert spark.jvm_mib("2g") == 2048 and spark.jvm_mib("512m") == 512
    assert spark.with_overhead("8g") == 8192 + 819
    import pytest

    with pytest.raises(ValueError):
        spark.jvm_mib("2Gi")


def test_jobs_follow_consumers_specs(tmp_path):
    d = tmp_path / "consumers"
    d.mkdir()
    (d / "billing-agg.yaml").write_text(yaml.safe_dump({
        "group": "billing-agg", "job": "spark/billing_agg.py",
        "checkpoint": "s3a://bucket/billing"}))
    (d / "rpc-billing.yaml").write_text(yaml.safe_dump({"group": "rpc-billing"}))
    (d / "not-a-group.yaml").write_text(yaml.safe_dump({"group": "nope", "job": "x.py"}))
    jobs = {j.name: j for j in spark.discover(tmp_path, REGISTRY)}
    assert sorted(jobs) == ["billing-agg", "rpc-billing"]
    assert jobs["billing-agg"].principal == "billing-aggregator"
    assert jobs["rpc-billing"].entry == "spark/rpc_billing.py"
    s = parse({})
    assert spark.checkpoint_of(s, jobs["billing-agg"]) == "s3a://bucket/billing"
    assert spark.checkpoint_of(s, jobs["rpc-billing"]) == "s3a://hanzo-stream/checkpoints/rpc-billing"


def test_without_consumers_dir_the_registry_spark_groups_run(tmp_path):
    jobs = spark.discover(tmp_path, REGISTRY)
    assert [j.name for j in jobs] == list(spark.DEFAULT_JOBS)
    assert [j.executors for j in jobs] == [REGISTRY.group(n).consumers for n in spark.DEFAULT_JOBS]


def test_spark_off_renders_no_applications_or_rbac():
    out = render("dev", (("spark", "false"),))
    assert not of_kind(out, "SparkApplication") and not of_kind(out, "Role")
    assert not _drivers(out)
    assert not [p for p in of_kind(out, "NetworkPolicy") if p["metadata"]["name"] == "spark-jobs"]


def test_driver_rbac_is_namespaced_and_minimal():
    out = render("prod")
    (role,) = [r for r in of_kind(out, "Role") if r["metadata"]["name"] == "spark"]
    assert {r for rule in role["rules"] for r in rule["resources"]} == {
        "pods", "services", "configmaps", "persistentvolumeclaims"}
    assert not of_kind(out, "ClusterRole")


def test_reconciler_reruns_only_when_its_inputs_change():
    s = parse({})
    text = (ROOT / "topics.yaml").read_text()
    assert content_hash(text, s) == content_hash(text, s)
    assert content_hash(text + "\n# new topic\n", s) != content_hash(text, s)
    assert content_hash(text, parse({"reconcilerImage": "ghcr.io/hanzoai/hanzo-stream:0.2.0"})) \
        != content_hash(text, s)
    # A grown cluster re-runs apply: `replication.profile: cluster` now means RF 3.
    assert content_hash(text, parse({"brokers": "3"})) != content_hash(text, s)
    assert content_hash(text, parse({"brokers": "3", "cpuLimit": "2"})) == content_hash(
        text, parse({"brokers": "3"}))
