"""Monitoring wiring: whatever monitoring/ holds, plus thresholds from the registry.

Files are found by globbing, so the wiring follows the monitoring issue's files as they
change: the JMX exporter rules (`*jmx*.y*ml`), Prometheus rule files (YAML documents
with `groups:`; promtool test files are skipped) and Grafana dashboards (JSON with
`panels`). Consumer-lag alerts are generated per registry group from its `lag:`
thresholds; alert rules in files that alert on lag are replaced by them, so a threshold
lives only in topics.yaml.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from hanzo_stream.monitoring import with_runbook_links
from hanzo_stream.monitoring.alerts import rule_groups
from hanzo_stream.registry import Registry

from . import security_context
from .cluster import JmxRules
from .credentials import SASL_FLAGS_KEY, mechanism, user_secret
from .reconciler import connection_env
from .settings import StackSettings
from .tls import CA_FILE, CA_MOUNT, ca_volume
from .topology import PART_OF, Topology, labels

FALLBACK_JMX_RULES = "lowercaseOutputName: true\nrules:\n  - pattern: '.*'\n"
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


def prometheus_rule(top: Topology, files: MonitoringFiles, registry: Registry,
                    prom_labels: dict, runbook_base: str) -> dict:
    """The rule files' groups, with the registry's generated ones computed from topics.yaml
    now (a stale generated file cannot win), each runbook link opening under runbook_base."""
    generated = rule_groups(registry)
    names = {g["name"] for g in generated}
    groups = [g for g in files.rule_groups if g.get("name") not in names] + generated
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
        "metadata": {"name": "hanzo-stream", "namespace": top.namespace,
                     "labels": {**labels("monitoring", "hanzo-stream-rules"), **prom_labels}},
        "spec": {"groups": with_runbook_links(groups, runbook_base)},
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


SASL_FLAGS_DIR = "/etc/kafka-exporter"


def serving(port: str, ready: str, live: str | None = None, *, ready_every: int = 15,
            live_delay: int | None = None, requests: tuple[str, str], limits: tuple[str, str]) -> dict:
    """What each of the platform's small HTTP servers has the same way: readiness on `ready`,
    liveness (every 30 s, five misses) on `live`, its CPU and memory (requests, limits) and the
    hardened container securityContext."""
    live_probe = {"httpGet": {"path": live or ready, "port": port}, "periodSeconds": 30,
                  "failureThreshold": 5}
    if live_delay is not None:
        live_probe["initialDelaySeconds"] = live_delay
    return {"readinessProbe": {"httpGet": {"path": ready, "port": port}, "periodSeconds": ready_every},
            "livenessProbe": live_probe,
            "resources": {"requests": {"cpu": requests[0], "memory": requests[1]},
                          "limits": {"cpu": limits[0], "memory": limits[1]}},
            "securityContext": security_context.container()}


def hardened_pod(uid: int, container: dict, volumes: list[dict], grace_seconds: int | None = None) -> dict:
    """The pod spec each of them runs in: no service-account token (none calls the API
    server), the pod securityContext for the image's user `uid`, its one container."""
    grace = {} if grace_seconds is None else {"terminationGracePeriodSeconds": grace_seconds}
    return {"automountServiceAccountToken": False, **grace,
            "securityContext": security_context.pod(uid), "containers": [container], "volumes": volumes}


def _exporter_container(s: StackSettings, top: Topology) -> tuple[dict, list[dict]]:
    """The platform's own exporter (hanzo_stream.monitoring.lag_exporter, the same metric names
    and labels) or danielqsj/kafka_exporter; either logs in as exporterPrincipal over SASL_SSL.
    Returns the container's fields and the volumes they need. The password is never in argv:
    kafka_exporter takes it only as a flag, so its flags come from a mounted Secret file
    (kingpin's `@file`), not from `$(VAR)` expansion, which would put it in /proc/*/cmdline."""
    who = s.exporterPrincipal
    if s.kafkaExporter == "hanzo-stream":
        return {"image": s.reconcilerImage,
                "command": ["python3", "-m", "hanzo_stream.monitoring.lag_exporter",
                            "--listen", f"0.0.0.0:{EXPORTER_PORT}"],
                "env": connection_env(top, who)}, []
    mech = {"PLAIN": "plain", "SCRAM-SHA-512": "scram-sha512"}[mechanism(who)]
    flags = {"name": "sasl-flags", "secret": {
        "secretName": user_secret(who), "defaultMode": 0o440,
        "items": [{"key": SASL_FLAGS_KEY, "path": SASL_FLAGS_KEY}]}}
    return {"image": s.kafkaExporterImage,
            "args": [
                f"--kafka.server={top.bootstrap}",
                "--sasl.enabled", f"--sasl.mechanism={mech}",
                f"@{SASL_FLAGS_DIR}/{SASL_FLAGS_KEY}",
                "--tls.enabled", f"--tls.ca-file={CA_FILE}",
                f"--tls.server-name={top.client_service}.{top.namespace}.svc",
                f"--web.listen-address=:{EXPORTER_PORT}",
            ],
            "volumeMounts": [{"name": "sasl-flags", "mountPath": SASL_FLAGS_DIR,
                              "readOnly": True}]}, [flags]


def exporter(s: StackSettings, top: Topology) -> list[dict]:
    """The consumer-lag exporter Deployment and its Service; password via the Secret."""
    container, volumes = _exporter_container(s, top)
    mounts = container.pop("volumeMounts", [])
    deploy = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "kafka-exporter", "namespace": top.namespace,
                     "labels": EXPORTER_LABELS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": EXPORTER_LABELS},
            "template": {"metadata": {"labels": EXPORTER_LABELS}, "spec": hardened_pod(65534, {
                "name": "kafka-exporter",
                **container,
                "ports": [{"name": "metrics", "containerPort": EXPORTER_PORT}],
                **serving("metrics", "/healthz", requests=("50m", "64Mi"), limits=("250m", "256Mi")),
                "volumeMounts": [{"name": "kafka-ca", "mountPath": CA_MOUNT, "readOnly": True}, *mounts],
            }, [ca_volume(), *volumes])},
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
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": job.name, "namespace": top.namespace, "labels": pod_labels},
        "spec": {
            "replicas": job.replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/name": job.name,
                                         "app.kubernetes.io/component": "consumer-job"}},
            "template": {"metadata": {"labels": pod_labels, "annotations": {
                "prometheus.io/scrape": "true", "prometheus.io/port": str(CONSUMER_METRICS_PORT),
                "prometheus.io/path": "/metrics"}}, "spec": hardened_pod(185, {
                "name": job.name,
                "image": s.sparkImage,
                "workingDir": APP_HOME,
                "command": ["python3", "-m", "hanzo_stream.jobs.cli", "run", job.name,
                            "--registry", f"{APP_HOME}/topics.yaml",
                            "--consumers", f"{APP_HOME}/consumers"],
                "env": env,
                "ports": [{"name": "metrics", "containerPort": CONSUMER_METRICS_PORT}],
                **serving("metrics", "/metrics", live_delay=30, requests=("100m", "128Mi"),
                          limits=("1", "512Mi")),
                "volumeMounts": [{"name": "kafka-ca", "mountPath": CA_MOUNT, "readOnly": True},
                                 {"name": "state", "mountPath": CONSUMER_HOME},
                                 {"name": "tmp", "mountPath": "/tmp"}],
            }, [ca_volume(), {"name": "state", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}],
                grace_seconds=60)},  # SIGTERM: checkpoint, commit, leave the group
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
    return {"name": "consumer-job-metrics", "selector": CONSUMER_LABELS, "port": CONSUMER_METRICS_PORT}


# ---------------------------------------------------------------- dead letters -> PagerDuty

DEAD_LETTER_MONITOR = "dead-letter-monitor"
DEAD_LETTER_MONITOR_PORT = 9309
DEAD_LETTER_MONITOR_LABELS = labels("monitoring", DEAD_LETTER_MONITOR)
ALERTMANAGER = "alertmanager"
ALERTMANAGER_PORT = 9093
ALERTMANAGER_LABELS = labels("monitoring", ALERTMANAGER)
ALERTMANAGER_SECRET = "hanzo-stream-alertmanager"
ALERTMANAGER_CONFIG_MOUNT = "/etc/alertmanager/config"
ROUTING_KEY = "pagerduty-routing-key"  # key of the Secret, file name in the mount



def _service(top: Topology, name: str, selector: dict, port: int, port_name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": top.namespace, "labels": selector},
            "spec": {"selector": selector,
                     "ports": [{"name": port_name, "port": port, "targetPort": port_name}]}}


def dead_letter_monitor(s: StackSettings, top: Topology, registry: Registry,
                        registry_config_map: str) -> list[dict]:
    """The dead-letter-monitor group: counters for the dead-letter alerts, as its principal.

    Runs `python -m hanzo_stream.monitoring.dead_letter_monitor` from the hanzo-stream image
    (the reconciler's), reading topics.yaml from the reconciler's ConfigMap.
    """
    from .reconciler import REGISTRY_MOUNT, connection_env

    principal = registry.group(DEAD_LETTER_MONITOR).principal
    deploy = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": DEAD_LETTER_MONITOR, "namespace": top.namespace,
                     "labels": {**DEAD_LETTER_MONITOR_LABELS,
                                "hanzo.ai/consumer-group": DEAD_LETTER_MONITOR}},
        "spec": {
            "replicas": registry.group(DEAD_LETTER_MONITOR).consumers,
            "selector": {"matchLabels": DEAD_LETTER_MONITOR_LABELS},
            "template": {"metadata": {"labels": DEAD_LETTER_MONITOR_LABELS}, "spec": hardened_pod(10001, {
                "name": DEAD_LETTER_MONITOR,
                "image": s.reconcilerImage,
                "command": ["python", "-m", "hanzo_stream.monitoring.dead_letter_monitor"],
                "args": ["--listen", f"0.0.0.0:{DEAD_LETTER_MONITOR_PORT}",
                         "--registry", f"{REGISTRY_MOUNT}/topics.yaml"],
                "env": connection_env(top, principal),
                "ports": [{"name": "metrics", "containerPort": DEAD_LETTER_MONITOR_PORT}],
                **serving("metrics", "/metrics", requests=("20m", "64Mi"), limits=("250m", "256Mi")),
                "volumeMounts": [
                    {"name": "registry", "mountPath": REGISTRY_MOUNT, "readOnly": True},
                    {"name": "kafka-ca", "mountPath": CA_MOUNT, "readOnly": True}],
            }, [{"name": "registry", "configMap": {"name": registry_config_map}}, ca_volume()])},
        },
    }
    return [deploy, _service(top, DEAD_LETTER_MONITOR, DEAD_LETTER_MONITOR_LABELS,
                             DEAD_LETTER_MONITOR_PORT, "metrics")]


def dead_letter_monitor_service_monitor(top: Topology, prom_labels: dict) -> dict:
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": {"name": DEAD_LETTER_MONITOR, "namespace": top.namespace,
                     "labels": {**DEAD_LETTER_MONITOR_LABELS, **prom_labels}},
        "spec": {"selector": {"matchLabels": DEAD_LETTER_MONITOR_LABELS},
                 "namespaceSelector": {"matchNames": [top.namespace]},
                 "endpoints": [{"port": "metrics", "interval": "30s"}]},
    }


def alertmanager_config(s: StackSettings) -> str:
    """The routing hanzo_stream.monitoring.alertmanager renders for the local platform too; the
    routing key stays in the Secret's other key, mounted next to it."""
    from hanzo_stream.monitoring import alertmanager as am

    return am.render(f"{ALERTMANAGER_CONFIG_MOUNT}/{ROUTING_KEY}", s.pagerdutyUrl)


def alertmanager(s: StackSettings, top: Topology, routing_key: object) -> list[dict]:
    """Alertmanager with its configuration and PagerDuty routing key from one Secret.

    routing_key: the Pulumi secret (pagerdutyRoutingKey). The program marks the Secret's data
    secret; the Deployment only mounts it. One replica: a second would need the gossip mesh.
    Prometheus sends to Service `alertmanager:9093` (docs/monitoring.md).
    """
    config = alertmanager_config(s)
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": ALERTMANAGER_SECRET, "namespace": top.namespace,
                           "labels": labels("credentials", ALERTMANAGER_SECRET)},
              "stringData": {"alertmanager.yml": config, ROUTING_KEY: routing_key}}
    config_sha = hashlib.sha256(config.encode()).hexdigest()[:16]
    deploy = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": ALERTMANAGER, "namespace": top.namespace, "labels": ALERTMANAGER_LABELS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": ALERTMANAGER_LABELS},
            "template": {
                # A changed configuration rolls the pod; a rotated key is read at the next page.
                "metadata": {"labels": ALERTMANAGER_LABELS,
                             "annotations": {"hanzo.ai/alertmanager-config-sha": config_sha}},
                "spec": hardened_pod(65534, {
                    "name": ALERTMANAGER,
                    "image": s.alertmanagerImage,
                    "args": [f"--config.file={ALERTMANAGER_CONFIG_MOUNT}/alertmanager.yml",
                             "--storage.path=/alertmanager",
                             f"--web.listen-address=:{ALERTMANAGER_PORT}",
                             "--cluster.listen-address="],
                    "ports": [{"name": "web", "containerPort": ALERTMANAGER_PORT}],
                    **serving("web", "/-/ready", "/-/healthy", ready_every=10,
                              requests=("20m", "64Mi"), limits=("250m", "256Mi")),
                    "volumeMounts": [
                        {"name": "config", "mountPath": ALERTMANAGER_CONFIG_MOUNT, "readOnly": True},
                        {"name": "data", "mountPath": "/alertmanager"}],
                }, [{"name": "config", "secret": {"secretName": ALERTMANAGER_SECRET, "defaultMode": 0o440}},
                    {"name": "data", "emptyDir": {}}]),
            },
        },
    }
    return [secret, deploy, _service(top, ALERTMANAGER, ALERTMANAGER_LABELS, ALERTMANAGER_PORT, "web")]


def monitoring_policy_targets(s: StackSettings, consumer_jobs: Sequence[ConsumerJob] = ()) -> list[dict]:
    """Pods only the monitoring namespace may reach: consumer jobs' and the monitor's metrics,
    Alertmanager's API."""
    out = [consumer_policy_target()] if consumer_jobs else []
    if s.deadLetterMonitor:
        out.append({"name": "dead-letter-monitor-metrics", "selector": DEAD_LETTER_MONITOR_LABELS,
                    "port": DEAD_LETTER_MONITOR_PORT})
    if s.alertmanager:
        out.append({"name": "alertmanager-api", "selector": ALERTMANAGER_LABELS,
                    "port": ALERTMANAGER_PORT})
    return out
