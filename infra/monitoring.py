"""Monitoring wiring: whatever monitoring/ holds, plus thresholds from the registry.

Files are found by globbing, so the wiring follows the monitoring issue's files as they
change: the JMX exporter rules (`*jmx*.y*ml`), Prometheus rule files (YAML documents
with `groups:`; promtool test files are skipped) and Grafana dashboards (JSON with
`panels`). Consumer-lag alerts are generated per registry group from its `lag:`
thresholds; alert rules in files that alert on lag are replaced by them, so a threshold
lives only in topics.yaml.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from hanzo_stream.registry import Registry

from .cluster import JmxRules
from .credentials import mechanism, password_env
from .reconciler import connection_env
from .settings import StackSettings
from .tls import CA_FILE, CA_MOUNT, ca_volume
from .topology import PART_OF, Topology, labels

FALLBACK_JMX_RULES = "lowercaseOutputName: true\nrules:\n  - pattern: '.*'\n"
LAG_METRIC = "kafka_consumergroup_lag"
EXPORTER_PORT = 9308
EXPORTER_LABELS = labels("monitoring", "kafka-exporter")


@dataclass
class MonitoringFiles:
    jmx: JmxRules
    rule_groups: list[dict] = field(default_factory=list)
    dashboards: dict[str, str] = field(default_factory=dict)  # file name -> JSON text
    sources: list[str] = field(default_factory=list)


def discover(root: Path) -> MonitoringFiles:
    mon = root / "monitoring"
    jmx_files = sorted(mon.glob("**/*jmx*.y*ml")) if mon.is_dir() else []
    jmx = (JmxRules("kafka-jmx.yaml", jmx_files[0].read_text()) if jmx_files
           else JmxRules("kafka-jmx.yaml", FALLBACK_JMX_RULES))
    found = MonitoringFiles(jmx, sources=[str(p.relative_to(root)) for p in jmx_files[:1]])
    if not mon.is_dir():
        return found
    for p in sorted(mon.glob("**/*.y*ml")):
        if p in jmx_files or "test" in p.name or "tests" in p.relative_to(mon).parts:
            continue
        try:
            docs = [d for d in yaml.safe_load_all(p.read_text()) if isinstance(d, dict)]
        except yaml.YAMLError:
            continue
        for d in docs:
            if isinstance(d.get("groups"), list):
                found.rule_groups += d["groups"]
                found.sources.append(str(p.relative_to(root)))
    for p in sorted(mon.glob("**/*.json")):
        try:
            doc = json.loads(p.read_text())
        except json.JSONDecodeError:
            continue
        if isinstance(doc, dict) and "panels" in doc:
            found.dashboards[p.name] = p.read_text()
            found.sources.append(str(p.relative_to(root)))
    return found


def registry_rule_groups(registry: Registry) -> list[dict]:
    """Rule groups computed from topics.yaml now, so a stale generated file cannot win:
    the monitoring package's generator when present, else our own lag alerts."""
    try:
        from hanzo_stream.monitoring.alerts import rule_groups
    except ImportError:
        return [lag_rules(registry)]
    return rule_groups(registry)


def lag_rules(registry: Registry) -> dict:
    """One warning and one critical alert per consumer group, thresholds from topics.yaml."""
    rules = []
    for g in registry.groups:
        for severity, threshold in (("warning", g.lag.warning), ("critical", g.lag.critical)):
            rules.append({
                "alert": f"HanzoStreamConsumerLag{severity.capitalize()}",
                "expr": f'sum by (consumergroup) ({LAG_METRIC}{{consumergroup="{g.name}"}})'
                        f" > {threshold}",
                "for": "10m",
                "labels": {"severity": severity, "consumergroup": g.name},
                "annotations": {
                    "summary": f"Consumer group {g.name} lags by more than {threshold} messages",
                    "runbook": "docs/runbooks/consumer-lag.md",
                },
            })
    return {"name": "hanzo-stream-consumer-lag", "rules": rules}


def prometheus_rule(top: Topology, files: MonitoringFiles, registry: Registry,
                    prom_labels: dict) -> dict:
    generated = registry_rule_groups(registry)
    names = {g["name"] for g in generated}
    groups = [g for g in files.rule_groups if g.get("name") not in names] + generated
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
        "metadata": {"name": "hanzo-stream", "namespace": top.namespace,
                     "labels": {**labels("monitoring", "hanzo-stream-rules"), **prom_labels}},
        "spec": {"groups": groups},
    }


def pod_monitor(top: Topology, prom_labels: dict) -> dict:
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
        "metadata": {"name": "kafka", "namespace": top.namespace,
                     "labels": {**top.broker_labels, **prom_labels}},
        "spec": {"selector": {"matchLabels": top.broker_labels},
                 "namespaceSelector": {"matchNames": [top.namespace]},
                 "podMetricsEndpoints": [{"port": "metrics", "interval": "30s"}]},
    }


def exporter(s: StackSettings, top: Topology) -> list[dict]:
    """danielqsj/kafka_exporter for consumer lag, over SASL_SSL; password via $(VAR)."""
    who = s.exporterPrincipal
    mech = {"PLAIN": "plain", "SCRAM-SHA-512": "scram-sha512"}[mechanism(who)]
    deploy = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "kafka-exporter", "namespace": top.namespace,
                     "labels": EXPORTER_LABELS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": EXPORTER_LABELS},
            "template": {"metadata": {"labels": EXPORTER_LABELS}, "spec": {
                "automountServiceAccountToken": False,
                "securityContext": {"runAsNonRoot": True, "runAsUser": 65534,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{
                    "name": "kafka-exporter",
                    "image": s.kafkaExporterImage,
                    "args": [
                        f"--kafka.server={top.bootstrap}",
                        "--sasl.enabled", f"--sasl.mechanism={mech}",
                        "--sasl.username=$(KAFKA_USERNAME)", "--sasl.password=$(KAFKA_PASSWORD)",
                        "--tls.enabled", f"--tls.ca-file={CA_FILE}",
                        f"--tls.server-name={top.client_service}.{top.namespace}.svc",
                        f"--web.listen-address=:{EXPORTER_PORT}",
                    ],
                    "env": [password_env("KAFKA_USERNAME", who, "username"),
                            password_env("KAFKA_PASSWORD", who)],
                    "ports": [{"name": "metrics", "containerPort": EXPORTER_PORT}],
                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"},
                                       "periodSeconds": 15},
                    "livenessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"},
                                      "periodSeconds": 30, "failureThreshold": 5},
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                                  "limits": {"cpu": "250m", "memory": "256Mi"}},
                    "securityContext": {"allowPrivilegeEscalation": False,
                                        "readOnlyRootFilesystem": True,
                                        "capabilities": {"drop": ["ALL"]}},
                    "volumeMounts": [{"name": "kafka-ca", "mountPath": CA_MOUNT,
                                      "readOnly": True}],
                }],
                "volumes": [ca_volume()],
            }},
        },
    }
    svc = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kafka-exporter", "namespace": top.namespace,
                     "labels": EXPORTER_LABELS},
        "spec": {"selector": EXPORTER_LABELS,
                 "ports": [{"name": "metrics", "port": EXPORTER_PORT, "targetPort": "metrics"}]},
    }
    return [deploy, svc]


def service_monitor(top: Topology, prom_labels: dict) -> dict:
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": {"name": "kafka-exporter", "namespace": top.namespace,
                     "labels": {**EXPORTER_LABELS, **prom_labels}},
        "spec": {"selector": {"matchLabels": EXPORTER_LABELS},
                 "namespaceSelector": {"matchNames": [top.namespace]},
                 "endpoints": [{"port": "metrics", "interval": "30s"}]},
    }


def dashboards(files: MonitoringFiles, namespace: str) -> list[dict]:
    out = []
    for name, text in sorted(files.dashboards.items()):
        stem = re.sub(r"[^a-z0-9-]+", "-", Path(name).stem.lower()).strip("-")
        out.append({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"grafana-dashboard-{stem}", "namespace": namespace,
                         "labels": {**labels("monitoring", "grafana-dashboard"),
                                    "grafana_dashboard": "1"}},
            "data": {name: text},
        })
    return out


def exporter_policy_target() -> dict:
    return {"selector": EXPORTER_LABELS, "port": EXPORTER_PORT}



# ---------------------------------------------------------------- consumer jobs with /metrics

CONSUMER_METRICS_PORT = 9464
CONSUMER_HOME = "/var/lib/hanzo-stream"
APP_HOME = "/opt/hanzo-stream"  # where the jobs image keeps the repository (docs/images.md)
CONSUMER_LABELS = {"app.kubernetes.io/component": "consumer-job", "app.kubernetes.io/part-of": PART_OF}


@dataclass(frozen=True)
class ConsumerJob:
    """A `runtime: consumer` spec (llm-metrics): a Deployment of `replicas` group members."""

    name: str
    group: str
    principal: str
    replicas: int


def consumer_jobs(root: Path, registry: Registry) -> list[ConsumerJob]:
    """consumers/*.yaml with `runtime: consumer`, one Deployment each, replicas = the group's
    expected consumers (they share the partitions as members of one group)."""
    groups = {g.name: g for g in registry.groups}
    out = []
    for p in sorted((root / "consumers").glob("*.yaml")) if (root / "consumers").is_dir() else []:
        doc = yaml.safe_load(p.read_text())
        if not isinstance(doc, dict) or doc.get("runtime") != "consumer" or doc.get("group") not in groups:
            continue
        g = groups[doc["group"]]
        out.append(ConsumerJob(p.stem, g.name, g.principal, g.consumers))
    return out


def consumer_deployment(s: StackSettings, top: Topology, job: ConsumerJob) -> dict:
    """The job's members: the jobs image, its principal's Secret, /metrics on 9464, its
    counters' checkpoint on an emptyDir (kept across container restarts; a new pod starts
    from the committed offsets with fresh counters, a reset Prometheus' rate() absorbs)."""
    pod_labels = {**labels("consumer-job", job.name), "hanzo.ai/consumer-group": job.group}
    env = [*connection_env(top, job.principal),
           {"name": "HANZO_STREAM_HOME", "value": CONSUMER_HOME},
           {"name": "HANZO_STREAM_METRICS_LISTEN", "value": f"0.0.0.0:{CONSUMER_METRICS_PORT}"}]
    probe = {"httpGet": {"path": "/metrics", "port": "metrics"}}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": job.name, "namespace": top.namespace, "labels": pod_labels},
        "spec": {
            "replicas": job.replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/name": job.name,
                                         "app.kubernetes.io/component": "consumer-job"}},
            "template": {"metadata": {"labels": pod_labels, "annotations": {
                "prometheus.io/scrape": "true", "prometheus.io/port": str(CONSUMER_METRICS_PORT),
                "prometheus.io/path": "/metrics"}}, "spec": {
                "automountServiceAccountToken": False,
                "terminationGracePeriodSeconds": 60,  # SIGTERM: checkpoint, commit, leave the group
                "securityContext": {"runAsNonRoot": True, "runAsUser": 185, "fsGroup": 185,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{
                    "name": job.name,
                    "image": s.sparkImage,
                    "workingDir": APP_HOME,
                    "command": ["python3", "-m", "hanzo_stream.jobs.cli", "run", job.name,
                                "--registry", f"{APP_HOME}/topics.yaml",
                                "--consumers", f"{APP_HOME}/consumers"],
                    "env": env,
                    "ports": [{"name": "metrics", "containerPort": CONSUMER_METRICS_PORT}],
                    "readinessProbe": {**probe, "periodSeconds": 15},
                    "livenessProbe": {**probe, "periodSeconds": 30, "failureThreshold": 5,
                                      "initialDelaySeconds": 30},
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                  "limits": {"cpu": "1", "memory": "512Mi"}},
                    "securityContext": {"allowPrivilegeEscalation": False,
                                        "readOnlyRootFilesystem": True,
                                        "capabilities": {"drop": ["ALL"]}},
                    "volumeMounts": [{"name": "kafka-ca", "mountPath": CA_MOUNT, "readOnly": True},
                                     {"name": "state", "mountPath": CONSUMER_HOME},
                                     {"name": "tmp", "mountPath": "/tmp"}],
                }],
                "volumes": [ca_volume(), {"name": "state", "emptyDir": {}},
                            {"name": "tmp", "emptyDir": {}}],
            }},
        },
    }


def consumer_pod_monitor(top: Topology, job: ConsumerJob, prom_labels: dict) -> dict:
    """Every member is scraped (each counts its own partitions; dashboards sum them)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
        "metadata": {"name": job.name, "namespace": top.namespace,
                     "labels": {**labels("monitoring", job.name), **prom_labels}},
        "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": job.name,
                                              "app.kubernetes.io/component": "consumer-job"}},
                 "namespaceSelector": {"matchNames": [top.namespace]},
                 "podMetricsEndpoints": [{"port": "metrics", "interval": "30s"}]},
    }


def consumer_policy_target() -> dict:
    return {"selector": CONSUMER_LABELS, "port": CONSUMER_METRICS_PORT}
