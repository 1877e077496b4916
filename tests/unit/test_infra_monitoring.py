"""Monitoring wiring: whatever monitoring/ holds ends up in the cluster, thresholds from
the registry; and the same wiring works with other sets of files."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import yaml

from hanzo_stream.monitoring import RUNBOOK_BASE_URL
from hanzo_stream.registry import load_registry
from infra import monitoring
from infra.topology import Topology

from .infra_helpers import ROOT, env_map, kafka_container, obj, of_kind, render, resource

REGISTRY = load_registry(ROOT / "topics.yaml")


def alert_rules(rule: dict) -> list[dict]:
    return [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]


def test_jmx_agent_runs_with_the_project_rules_file():
    out = render("prod")
    files = sorted((ROOT / "monitoring").glob("**/*jmx*.y*ml"))
    assert files, "monitoring/ has a JMX exporter rules file"
    cm = obj(out, "ConfigMap", "kafka-jmx-rules")
    assert cm["data"] == {"kafka-jmx.yaml": files[0].read_text()}
    env = env_map(kafka_container(out))
    assert env["HANZO_JMX_AGENT_OPTS"]["value"] == (
        "-javaagent:/opt/hanzo/jmx/jmx_prometheus_javaagent.jar=9404:/opt/hanzo/jmx-rules/kafka-jmx.yaml")
    # Only the broker's JVM gets it (the entrypoint, test_infra_entrypoint): a Kafka tool run
    # with the container's environment (kubectl exec) must not load the agent.
    assert "KAFKA_OPTS" not in env
    assert [e for e in env.values() if "-javaagent" in e.get("value", "")] == [
        env["HANZO_JMX_AGENT_OPTS"]]
    pm = obj(out, "PodMonitor", "kafka")
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    assert pm["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def init_container(out: dict) -> dict:
    inits = obj(out, "StatefulSet", "kafka")["spec"]["template"]["spec"]["initContainers"]
    return next(c for c in inits if c["name"] == "jmx-agent")


def run_init(out: dict, tmp: Path, files: dict[str, bytes], path: str = "/usr/bin:/bin"):
    """The init container's command with sh: its image's files (`files`, by absolute path)
    and the pod's emptyDir moved under `tmp`."""
    init = init_container(out)
    env = {e["name"]: e["value"] for e in init["env"]}
    for name, data in files.items():
        f = tmp / "image" / name.lstrip("/")
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data)
    if "SOURCE" in env:
        env["SOURCE"] = str(tmp / "image" / env["SOURCE"].lstrip("/"))
    dest = tmp / "emptydir" / Path(env["DEST"]).name
    dest.parent.mkdir()
    env |= {"DEST": str(dest), "PATH": path}
    proc = subprocess.run(init["command"], env=env, capture_output=True, text=True, timeout=30)
    return proc, dest


AGENT = b"PK\x03\x04 a stand-in for jmx_prometheus_javaagent.jar"


def test_jmx_agent_comes_from_the_reconciler_image_without_network(tmp_path):
    from infra.settings import JMX_AGENT_IN_IMAGE

    out = render("prod", (("jmxAgentSha256", hashlib.sha256(AGENT).hexdigest()),))
    init = init_container(out)
    assert init["image"] == "ghcr.io/hanzoai/hanzo-stream:0.1.0"  # reconcilerImage
    assert {e["name"]: e["value"] for e in init["env"]}["SOURCE"] == JMX_AGENT_IN_IMAGE
    assert "curl" not in init["command"][2] and "URL" not in {e["name"] for e in init["env"]}
    proc, dest = run_init(out, tmp_path, {JMX_AGENT_IN_IMAGE: AGENT})
    assert proc.returncode == 0, proc.stderr
    assert dest.read_bytes() == AGENT and not dest.with_name(dest.name + ".part").exists()


def test_a_jar_with_another_checksum_never_reaches_the_broker(tmp_path):
    from infra.settings import JMX_AGENT_IN_IMAGE

    proc, dest = run_init(render("prod"), tmp_path, {JMX_AGENT_IN_IMAGE: AGENT})  # pinned sha differs
    assert proc.returncode != 0 and "FAILED" in proc.stdout + proc.stderr
    assert not dest.exists()


def test_download_only_when_a_url_is_set_explicitly(tmp_path):
    mirror = "https://artifacts.example.com/jmx_prometheus_javaagent-1.0.1.jar"
    sets = (("jmxAgentUrl", mirror), ("initImage", "docker.io/curlimages/curl:8.10.1"),
            ("jmxAgentSha256", hashlib.sha256(AGENT).hexdigest()))
    out = render("prod", sets)
    init = init_container(out)
    assert init["image"] == "docker.io/curlimages/curl:8.10.1"
    assert {e["name"]: e["value"] for e in init["env"]}["URL"] == mirror
    (tmp_path / "mirror.jar").write_bytes(AGENT)
    fake = tmp_path / "bin" / "curl"  # "downloads" mirror.jar to the -o file; records its arguments
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$@" > {tmp_path / "calls"}\n'
                    f'while [ "$1" != -o ]; do shift; done\ncp {tmp_path / "mirror.jar"} "$2"\n')
    fake.chmod(0o755)
    proc, dest = run_init(out, tmp_path, {}, f"{fake.parent}:/usr/bin:/bin")
    assert proc.returncode == 0, proc.stderr
    assert dest.read_bytes() == AGENT
    assert (tmp_path / "calls").read_text().split()[-1] == mirror


def test_every_project_rule_group_and_registry_thresholds_are_deployed():
    (rule,) = of_kind(render("prod"), "PrometheusRule")
    deployed = {g["name"] for g in rule["spec"]["groups"]}
    disc = monitoring.discover(ROOT)
    assert {g["name"] for g in disc.rule_groups} <= deployed
    exprs = [r["expr"] for r in alert_rules(rule)]
    for g in REGISTRY.groups:
        if g.batch_every_ms is not None:  # a scheduled reader: a missed-run alert, no thresholds
            assert any(f'consumergroup="{g.name}"' in e and e.endswith("<= 0") for e in exprs), g.name
            continue
        for threshold in (g.lag.warning, g.lag.critical):
            assert any(f'consumergroup="{g.name}"' in e and e.endswith(f"> {threshold}")
                       for e in exprs), (g.name, threshold)
    assert len(deployed) == len(rule["spec"]["groups"])  # no group twice


def test_registry_thresholds_win_over_a_stale_generated_file(tmp_path):
    (tmp_path / "monitoring" / "rules").mkdir(parents=True)
    stale = {"groups": [{"name": "hanzo-stream-consumer-lag", "rules": [
        {"alert": "ConsumerLagWarning",
         "expr": 'kafka_consumer_group_lag{consumergroup="billing-agg"} > 5'}]},
        {"name": "kafka-brokers", "rules": [{"alert": "UnderReplicated",
                                             "expr": "kafka_under_replicated_partitions > 0"}]}]}
    (tmp_path / "monitoring" / "rules" / "alerts.yaml").write_text(yaml.safe_dump(stale))
    (tmp_path / "monitoring" / "rules" / "alerts.test.yaml").write_text(
        yaml.safe_dump({"rule_files": ["alerts.yaml"], "tests": []}))
    files = monitoring.discover(tmp_path)
    rule = monitoring.prometheus_rule(Topology("hanzo", "cluster.local", 3), files, REGISTRY, {},
                                      RUNBOOK_BASE_URL)
    exprs = [r["expr"] for r in alert_rules(rule)]
    assert "kafka_under_replicated_partitions > 0" in exprs
    assert not any(e.endswith("> 5") for e in exprs)
    assert any('consumergroup="billing-agg"' in e and e.endswith("> 100000") for e in exprs)


def test_without_monitoring_files_the_wiring_still_renders(tmp_path):
    files = monitoring.discover(tmp_path)
    assert files.jmx.text == monitoring.FALLBACK_JMX_RULES
    assert files.rule_groups == [] and files.dashboards == {}
    rule = monitoring.prometheus_rule(Topology("hanzo", "cluster.local", 1), files, REGISTRY, {},
                                      RUNBOOK_BASE_URL)
    assert len(alert_rules(rule)) >= 2 * len(REGISTRY.groups)


def test_dashboards_become_sidecar_config_maps(tmp_path):
    out = render("prod")
    want = sorted(p.name for p in (ROOT / "monitoring").glob("**/*.json")
                  if "panels" in json.loads(p.read_text()))
    cms = [m for m in of_kind(out, "ConfigMap") if m["metadata"].get("labels", {}).get(
        "grafana_dashboard") == "1"]
    assert sorted(k for m in cms for k in m["data"]) == want
    assert all(m["metadata"]["namespace"] == "monitoring" for m in cms)
    d = tmp_path / "monitoring" / "dashboards"
    d.mkdir(parents=True)
    (d / "Lag by Group.json").write_text(json.dumps({"title": "x", "panels": []}))
    (d / "not-a-dashboard.json").write_text(json.dumps({"hello": 1}))
    (cm,) = monitoring.dashboards(monitoring.discover(tmp_path), "monitoring")
    assert cm["metadata"]["name"] == "grafana-dashboard-lag-by-group"
    assert list(cm["data"]) == ["Lag by Group.json"]


def test_lag_exporter_connects_over_sasl_ssl_without_a_password_in_its_args():
    out = render("prod")
    c = obj(out, "Deployment", "kafka-exporter")["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == obj(out, "Job", next(
        j["metadata"]["name"] for j in of_kind(out, "Job")))["spec"]["template"]["spec"][
        "containers"][0]["image"]  # the platform's own exporter, from the reconciler image
    assert c["command"][:3] == ["python3", "-m", "hanzo_stream.monitoring.lag_exporter"]
    env = env_map(c)
    assert env["HANZO_STREAM_SECURITY_PROTOCOL"]["value"] == "SASL_SSL"
    assert env["HANZO_STREAM_BOOTSTRAP"]["value"] == "kafka.hanzo.svc.cluster.local:9093"
    # its own principal (DESCRIBE only, registry/platform.py), never the admin
    assert env["HANZO_STREAM_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == \
        "kafka-user-lag-exporter"
    assert env["HANZO_STREAM_SASL_USERNAME"]["valueFrom"]["secretKeyRef"]["name"] == \
        "kafka-user-lag-exporter"
    assert all("value" not in e or "assword" not in e["name"] for e in c["env"])
    sm = obj(out, "ServiceMonitor", "kafka-exporter")
    assert sm["spec"]["selector"]["matchLabels"] == obj(out, "Service", "kafka-exporter")[
        "spec"]["selector"]


def test_danielqsj_kafka_exporter_is_a_choice_and_gets_no_password_in_its_args():
    out = render("prod", (("kafkaExporter", "danielqsj"),))
    c = obj(out, "Deployment", "kafka-exporter")["spec"]["template"]["spec"]["containers"][0]
    assert c["image"].startswith("docker.io/danielqsj/kafka-exporter:v")
    args = c["args"]
    assert "--sasl.enabled" in args and "--tls.enabled" in args
    assert "--kafka.server=kafka.hanzo.svc.cluster.local:9093" in args
    # Kubernetes expands $(VAR) in args into the process's argv (/proc/*/cmdline): the login
    # comes from a file kingpin reads (`@file`), mounted from the principal's own Secret.
    assert not [a for a in args if "$(" in a or "password" in a.lower()]
    flags = [a for a in args if a.startswith("@")]
    assert len(flags) == 1
    mount = next(m for m in c["volumeMounts"] if flags[0][1:].startswith(m["mountPath"] + "/"))
    pod = obj(out, "Deployment", "kafka-exporter")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])["secret"]
    assert volume["secretName"] == "kafka-user-lag-exporter"
    (item,) = volume["items"]
    assert flags[0] == f"@{mount['mountPath']}/{item['path']}"
    data = obj(out, "Secret", "kafka-user-lag-exporter")["stringData"]
    lines = data[item["key"]].splitlines()
    assert lines == ["--sasl.username=lag-exporter", f"--sasl.password={data['password']}"]


def test_operator_resources_can_be_turned_off():
    out = render("dev", (("prometheusOperator", "false"), ("grafanaDashboards", "false")))
    assert not of_kind(out, "PrometheusRule") and not of_kind(out, "PodMonitor")
    assert not [m for m in of_kind(out, "ConfigMap") if "grafana" in m["metadata"]["name"]]
    assert of_kind(out, "Deployment")  # the exporter itself stays


def test_monitoring_sources_are_reported():
    sources = render("dev")["outputs"]["monitoringSources"]["value"]
    assert any(Path(s).name.startswith("jmx") for s in sources)


def test_pinned_agent_checksum_matches_the_jar_the_project_uses():
    """The init container refuses a jar whose SHA-256 differs; the pin must follow
    versions.JMX_EXPORTER_VERSION (the local platform fetches the same artifact)."""
    import hashlib

    from hanzo_stream.artifacts import jars, versions
    from infra.settings import JMX_AGENT_SHA256, JMX_AGENT_URL

    jar = jars.jmx_exporter_agent()  # from the cache .ci/install fills (Maven Central)
    assert hashlib.sha256(jar.read_bytes()).hexdigest() == JMX_AGENT_SHA256
    assert JMX_AGENT_URL.endswith(f"/{versions.JMX_EXPORTER_VERSION}/{jar.name}")


def test_the_reconciler_image_recipe_bakes_in_the_pinned_agent_where_the_init_container_looks():
    from infra.settings import JMX_AGENT_IN_IMAGE, JMX_AGENT_SHA256, JMX_AGENT_URL

    recipe = (ROOT / "images" / "Dockerfile.reconciler").read_text()
    assert f"--checksum=sha256:{JMX_AGENT_SHA256}" in recipe
    assert f"{JMX_AGENT_URL} \\\n    {JMX_AGENT_IN_IMAGE}\n" in recipe


def test_llm_metrics_runs_as_a_deployment_of_group_members_scraped_per_pod():
    """A `runtime: consumer` spec is no SparkApplication: a Deployment with one replica per
    expected consumer, its principal's Secret, /metrics scraped from every member, and only
    the monitoring namespace may reach it."""
    out = render("prod")
    g = REGISTRY.group("llm-metrics")
    assert "llm-metrics" not in {a["metadata"]["name"] for a in of_kind(out, "SparkApplication")}
    assert out["outputs"]["consumerJobs"]["value"] == ["llm-metrics"]
    deploy = obj(out, "Deployment", "llm-metrics")
    assert deploy["spec"]["replicas"] == g.consumers == 2
    pod = deploy["spec"]["template"]
    (c,) = pod["spec"]["containers"]
    assert c["command"][:5] == ["python3", "-m", "hanzo_stream.jobs.cli", "run", "llm-metrics"]
    assert c["image"] == "ghcr.io/hanzoai/hanzo-stream-spark:0.1.0"  # the jobs image: code, specs, schemas
    env = env_map(c)
    assert env["HANZO_STREAM_SASL_USERNAME"]["valueFrom"]["secretKeyRef"] == {
        "name": "kafka-user-llm-metrics", "key": "username"}
    assert env["HANZO_STREAM_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "kafka-user-llm-metrics"
    assert env["HANZO_STREAM_METRICS_LISTEN"]["value"] == f"0.0.0.0:{monitoring.CONSUMER_METRICS_PORT}"
    assert c["ports"] == [{"name": "metrics", "containerPort": monitoring.CONSUMER_METRICS_PORT}]
    assert {v["name"] for v in pod["spec"]["volumes"]} >= {"state", "kafka-ca"}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    pm = obj(out, "PodMonitor", "llm-metrics")
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert pm["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "interval": "30s"}]
    pol = obj(out, "NetworkPolicy", "consumer-job-metrics")
    assert pol["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (rule,) = pol["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": monitoring.CONSUMER_METRICS_PORT}]
    assert rule["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["monitoring"]
    deps = resource(out, "Deployment", "llm-metrics")["dependencies"]
    assert any(d.startswith("job-hanzo-stream-apply-") for d in deps)  # its SCRAM user exists first


def test_consumer_jobs_follow_the_specs(tmp_path):
    d = tmp_path / "consumers"
    d.mkdir()
    (d / "llm-metrics.yaml").write_text(yaml.safe_dump({"group": "llm-metrics", "runtime": "consumer"}))
    (d / "billing-agg.yaml").write_text(yaml.safe_dump({"group": "billing-agg"}))
    (d / "stray.yaml").write_text(yaml.safe_dump({"group": "nope", "runtime": "consumer"}))
    jobs = monitoring.consumer_jobs(tmp_path, REGISTRY)
    assert [(j.name, j.principal, j.replicas) for j in jobs] == [("llm-metrics", "llm-metrics", 2)]
    from infra import spark
    assert [j.name for j in spark.discover(tmp_path, REGISTRY)] == ["billing-agg"]


# ---------------------------------------------------------------- dead letters -> PagerDuty

ROUTING_KEY = "0123456789abcdef0123456789abcdef"
PAGING_SECRETS = (("pagerdutyRoutingKey", ROUTING_KEY), ("s3AccessKey", "AKIAEXAMPLE0001"),
                  ("s3SecretKey", "s3-secret-for-the-render"))


def paging() -> dict:
    return render("prod", (("s3Endpoint", "http://minio.hanzo:9000"),), PAGING_SECRETS)


def test_alertmanager_config_and_routing_key_come_from_a_secret():
    import shutil
    import subprocess

    from .infra_helpers import manifests, resource, secret_data

    out = paging()
    secret = resource(out, "Secret", monitoring.ALERTMANAGER_SECRET)
    assert secret["secret_paths"] == ["stringData"]  # a Pulumi secret, encrypted in the state
    data = secret_data(out, monitoring.ALERTMANAGER_SECRET)
    assert data[monitoring.ROUTING_KEY] == ROUTING_KEY
    config = yaml.safe_load(data["alertmanager.yml"])
    (pd,) = config["receivers"][0]["pagerduty_configs"]
    assert pd["routing_key_file"] == f"{monitoring.ALERTMANAGER_CONFIG_MOUNT}/{monitoring.ROUTING_KEY}"
    assert pd["url"] == "https://events.pagerduty.com/v2/enqueue" and "routing_key" not in pd
    assert ROUTING_KEY not in data["alertmanager.yml"]
    others = [m for m in manifests(out) if m["metadata"]["name"] != monitoring.ALERTMANAGER_SECRET]
    assert not [m["metadata"]["name"] for m in others if ROUTING_KEY in json.dumps(m)]
    pod = obj(out, "Deployment", "alertmanager")["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["image"] == "quay.io/prometheus/alertmanager:v0.25.0"
    assert f"--config.file={monitoring.ALERTMANAGER_CONFIG_MOUNT}/alertmanager.yml" in c["args"]
    vol = next(v for v in pod["volumes"] if v["name"] == "config")
    assert vol["secret"]["secretName"] == monitoring.ALERTMANAGER_SECRET
    assert c["securityContext"]["readOnlyRootFilesystem"] and pod["securityContext"]["runAsNonRoot"]
    assert obj(out, "Service", "alertmanager")["spec"]["ports"][0]["port"] == 9093
    policy = obj(out, "NetworkPolicy", "alertmanager-api")["spec"]
    assert policy["ingress"][0]["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "monitoring"]
    assert out["outputs"]["alertmanagerUrl"]["value"] == "http://alertmanager.hanzo.svc:9093"
    amtool = shutil.which("amtool")
    if amtool:  # Debian's prometheus-alertmanager (.ci/install-monitoring.sh) ships it
        import tempfile

        with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
            f.write(data["alertmanager.yml"])
            f.flush()
            res = subprocess.run([amtool, "check-config", f.name], capture_output=True, text=True)
        assert res.returncode == 0, res.stdout + res.stderr


def test_without_a_routing_key_no_alertmanager_is_deployed():
    out = render("prod")
    assert not [m for m in of_kind(out, "Deployment") if m["metadata"]["name"] == "alertmanager"]
    assert out["outputs"]["alertmanagerUrl"]["value"] is None


def test_dead_letter_monitor_runs_as_its_principal_and_is_scraped():
    out = render("prod")
    dep = obj(out, "Deployment", "dead-letter-monitor")
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["command"][-1] == "hanzo_stream.monitoring.dead_letter_monitor"
    env = env_map(c)
    ref = env["HANZO_STREAM_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "kafka-user-dead-letter-monitor", "key": "password"}
    cm = next(v for v in pod["volumes"] if v["name"] == "registry")["configMap"]["name"]
    assert cm.startswith("hanzo-stream-registry-")  # the reconciler's: one registry, one ConfigMap
    assert obj(out, "ConfigMap", cm)["data"]["topics.yaml"] == (ROOT / "topics.yaml").read_text()
    assert dep["spec"]["replicas"] == REGISTRY.group("dead-letter-monitor").consumers
    sm = obj(out, "ServiceMonitor", "dead-letter-monitor")
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    assert obj(out, "NetworkPolicy", "dead-letter-monitor-metrics")["spec"]["ingress"][0]["ports"] == [
        {"protocol": "TCP", "port": 9309}]
    (rule,) = of_kind(out, "PrometheusRule")
    names = {r["alert"] for r in alert_rules(rule)}
    assert {"DeadLettersWarning", "DeadLettersCritical", "DeadLettersArriving"} <= names


def test_jobs_on_s3_read_endpoint_and_keys_from_the_s3_secret():
    from .infra_helpers import resource, secret_data

    out = paging()
    assert resource(out, "Secret", "hanzo-stream-s3")["secret_paths"] == ["stringData"]
    assert secret_data(out, "hanzo-stream-s3")["endpoint"] == "http://minio.hanzo:9000"
    driver = obj(out, "Deployment", "audit-archive")
    template = yaml.safe_load(obj(out, "ConfigMap", "audit-archive-executor-template")["data"][
        "executor.yaml"])
    for container in (driver["spec"]["template"]["spec"]["containers"][0],
                      template["spec"]["containers"][0]):
        env = env_map(container)
        for var, key in (("HANZO_STREAM_S3_ENDPOINT", "endpoint"), ("AWS_ACCESS_KEY_ID", "access-key"),
                         ("AWS_SECRET_ACCESS_KEY", "secret-key")):
            assert "value" not in env[var]
            assert env[var]["valueFrom"]["secretKeyRef"]["name"] == "hanzo-stream-s3"
            assert env[var]["valueFrom"]["secretKeyRef"]["key"] == key
    text = json.dumps([driver, template])
    assert "minio.hanzo" not in text and "s3-secret-for-the-render" not in text
    assert not any("spark.hadoop.fs.s3a" in a for a in driver["spec"]["template"]["spec"][
        "containers"][0]["args"])
