"""The Pulumi program: read the stack's settings and the registry, render, check, register.

Everything is rendered to manifests first (`render`); the policy checks run on them before
any Kubernetes object is registered, so a stack that breaks the standard fails at `pulumi
preview`. Only the generated secrets the manifests embed (passwords, CA, certificate, the
founders' record) are registered before, at the stack's root. Then the components of
infra/components.py register the manifests.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pulumi

from hanzo_stream.core.broker_config import kraft_uuid
from hanzo_stream.pods import tls_reload
from hanzo_stream.registry import load_registry

from . import (
    broker,
    cluster,
    credentials,
    generated,
    k8s,
    monitoring,
    network,
    policy,
    preflight,
    quorum,
    reconciler,
    roller,
    schema_registry,
    spark,
    storage,
    tls,
)
from .components import (
    ClusterManifests,
    Gate,
    KafkaCluster,
    Monitoring,
    MonitoringManifests,
    NetworkPolicies,
    Reconciler,
    SchemaRegistry,
    SparkJobs,
)
from .settings import PROJECT, StackSettings, from_pulumi
from .topology import Topology

ROOT = Path(__file__).resolve().parent.parent


def _secret_setting(key: str) -> pulumi.Output | None:
    """Secret settings must have been set with --secret; a plain value is refused."""
    from pulumi.runtime.config import get_config_secret_keys_env, is_config_secret

    cfg = pulumi.Config(PROJECT)
    if cfg.get(key) is None:
        return None
    full = f"{PROJECT}:{key}"
    if not (is_config_secret(full) or full in get_config_secret_keys_env()):
        raise policy.PolicyViolation([policy.Violation(
            "no-plaintext-secrets", f"config {key}",
            f"set it with `pulumi config set --secret {key}`")])
    return cfg.require_secret(key)


def cluster_id(s: StackSettings, namespace_uid: pulumi.Input[str]) -> pulumi.Output:
    """The KRaft cluster id (Kafka's format: base64url of 16 bytes), a secret.

    It must live exactly as long as the brokers' volumes, because every volume is formatted
    with it and a broker refuses a volume of another cluster ("Invalid cluster.id"). The
    volumes outlive `pulumi destroy` (retained in the namespace, which is retained too), so
    an id kept in Pulumi state would not: the next `up` would make a new one and every
    broker would crash-loop on its old volume. So the id is derived from the namespace's
    uid, which lives exactly as long; `clusterId` pins another (adopting a running cluster).
    """
    if s.clusterId:
        return pulumi.Output.secret(s.clusterId)
    return pulumi.Output.secret(pulumi.Output.from_input(namespace_uid).apply(derived_cluster_id))


def derived_cluster_id(namespace_uid: str) -> str:
    """The id of the namespace `namespace_uid`: never one starting with "-", which the brokers'
    `kafka-storage format --cluster-id` would read as an option (a stack got one on 2026-12-02
    and its broker crash-looped)."""
    return kraft_uuid(lambda n: uuid.uuid5(
        uuid.NAMESPACE_URL, f"hanzo-stream:kraft:{namespace_uid}" + (f"#{n}" if n else "")).bytes)


def founding_controllers(s: StackSettings) -> pulumi.Output:
    """How many pods founded the controller quorum, recorded by the program itself.

    A `generated.Record` of the stack's size at its first `pulumi up`, which never changes
    afterwards: later values of `brokers` never reach it, so raising `brokers`
    on a running one-broker stack keeps the record at 1 and the new pods join instead of
    founding a rival quorum. Nothing for the user to get right; `initialControllers`
    overrides it only for a stack whose record is missing (e.g. state rebuilt) or wrong.
    """
    seed = s.initialControllers or s.brokers
    record = generated.Record("kafka-initial-controllers", seed,
                              opts=pulumi.ResourceOptions(protect=s.protect))
    if s.initialControllers:
        return pulumi.Output.from_input(s.initialControllers)
    return record.result.apply(int)  # numbers cross the engine as floats


def api_server_egress() -> pulumi.Output:
    """The brokers' egress rule to the API server (the roll gate reads its StatefulSet), from
    the cluster's own `kubernetes` EndpointSlice: its real addresses, whatever the site."""
    api = k8s.get("discovery.k8s.io/v1", "EndpointSlice", "kubernetes", "default")
    return pulumi.Output.all(api.endpoints, api.ports).apply(
        lambda v: network.api_server_rule(v[0] or [], v[1] or []))


@dataclass
class Stack:
    """What `render` makes: each component's manifests, and the outputs to export."""

    top: Topology
    cluster: ClusterManifests
    reconciler: list[dict]
    schema_registry: list[dict]
    monitoring: MonitoringManifests
    spark_rbac: list[dict]
    spark_apps: list[dict]
    policies: list[dict]
    exports: dict[str, object] = field(default_factory=dict)

    def checked(self) -> list[dict]:
        """What the policy sees (as before the components: not the Secrets, operators'
        objects, dashboards, storage patches or the quorum's record)."""
        c = self.cluster
        return [c.statefulset, *c.objects, *self.reconciler, *self.schema_registry,
                *self.monitoring.services, *self.policies, *self.spark_apps,
                *self.monitoring.consumers, *([c.roll_job, *c.roller] if c.roll_job else [])]


def guards(s: StackSettings, top: Topology) -> Gate:
    """A storageSize the volumes cannot take, fewer brokers than the quorum has voters, or a CA
    rollover step skipped stops the update before any Kubernetes object or certificate
    changes: every one of them waits for the guards (infra/storage.py, quorum.py, tls.py)."""
    last = storage.last_deployment()
    return Gate(pulumi.Output.all(storage.guard(s, top, last), quorum.guard(s, last),
                                  tls.guard(s, last)))


def render(s: StackSettings, root: Path, gate: Gate) -> Stack:
    """Every manifest of the stack, from the settings and the registry; registers nothing but
    the generated secrets they embed."""
    registry_file = root / "topics.yaml"
    registry = load_registry(registry_file)
    top = Topology.of(s)
    flavor = broker.FLAVORS[s.imageFlavor]
    if top.legacy_port and registry.legacy is None:
        raise policy.PolicyViolation([policy.legacy_window_missing(registry_file)])

    def render_brokers(founders: int | None = None) -> broker.Rendered:
        return broker.render(top, s.brokerConfigOverrides, founders=founders,
                             switch=s.takeoverSwitch, legacy_port=top.legacy_port,
                             rack_label=s.rackLabel)

    rendered = render_brokers()
    files = monitoring.discover(root)
    jobs = spark.discover(root, registry) if s.spark else []
    consumer_jobs = monitoring.consumer_jobs(root, registry)

    creds = credentials.generate(registry)
    certs = tls.build(s, top, gate.after())
    # What the brokers read at start and cannot reload. Principals are not among them: SCRAM
    # users live in the metadata log (the reconciler sets them), so a new one restarts nothing.
    # A renewed certificate is reloaded by each pod's tls-reload sidecar; only new names
    # (subject, SANs) need a restart.
    annotations: dict = {}
    if certs.cert_pem is not None:
        annotations["hanzo.ai/tls-names-sha"] = certs.cert_pem.apply(
            lambda pem: hashlib.sha256(tls_reload.identity(pem.encode()).encode()).hexdigest()[:16])

    secrets = [*credentials.manifests(top.namespace, creds), *certs.manifests,
               *spark.user_secrets(top, _secret_setting("s3AccessKey"),
                                   _secret_setting("s3SecretKey"),
                                   _secret_setting("clickhousePassword"), s.s3Endpoint,
                                   _secret_setting("postgresDsn"))]
    founders = founding_controllers(s)
    script = founders.apply(lambda n: broker.entrypoint(flavor, top, render_brokers(n)))
    sts = cluster.statefulset(s, top, flavor, rendered, files.jmx, annotations, script=script)
    kafka = [cluster.priority_class(top), cluster.service_account(top), *cluster.services(top),
             cluster.pdb(top),
             cluster.jmx_config_map(top, files.jmx),
             *(cluster.roll_gate_rbac(top) if cluster.gated(top) else [])]
    apply_job = reconciler.manifests(s, top, registry_file.read_text(), creds.digest())
    # A 3+ broker StatefulSet is OnDelete: the roller restarts its brokers (infra/roller.py).
    roll_job = roller.job(s, top, roller.template_digest(sts["spec"]["template"]))
    roller_objects = [*roller.rbac(top), roller.restart_cronjob(s, top)] if cluster.gated(top) else []
    registry_service = schema_registry.manifests(s, top) if s.schemaRegistry else []
    extras = monitoring.exporter(s, top)
    consumers = [monitoring.consumer_deployment(s, top, j) for j in consumer_jobs]
    if s.deadLetterMonitor:
        extras += monitoring.dead_letter_monitor(s, top, registry, apply_job[0]["metadata"]["name"])
    routing_key = _secret_setting("pagerdutyRoutingKey") if s.alertmanager else None
    if routing_key is not None:
        am_secret, *am = monitoring.alertmanager(s, top, routing_key)
        am_secret["stringData"] = pulumi.Output.secret(am_secret["stringData"])
        secrets.append(am_secret)
        extras += am
    elif s.alertmanager:
        pulumi.log.warn("no Alertmanager deployed: set the PagerDuty routing key with `pulumi config "
                        "set --secret pagerdutyRoutingKey ...` (or alertmanager: false)")
    operators = []
    if s.prometheusOperator:
        operators += [monitoring.consumer_pod_monitor(top, j, s.prometheusLabels) for j in consumer_jobs]
        operators += [monitoring.pod_monitor(top, s.prometheusLabels),
                      monitoring.service_monitor(top, s.prometheusLabels),
                      monitoring.prometheus_rule(top, files, registry, s.prometheusLabels,
                                                s.runbookBaseUrl)]
        if s.deadLetterMonitor:
            operators.append(monitoring.dead_letter_monitor_service_monitor(top, s.prometheusLabels))
    dashboards = monitoring.dashboards(files, s.monitoringNamespace) if s.grafanaDashboards else []
    spark_apps = [m for j in jobs for m in spark.manifests(s, top, j)]
    spark_rbac = spark.rbac(s, top) if jobs else []
    policies = network.manifests(
        top, s.clientNamespaces, s.monitoringNamespace,
        schema_registry.policy_target() if s.schemaRegistry else None,
        monitoring.exporter_policy_target(), spark.SERVICE_LABELS if jobs else None,
        [*monitoring.monitoring_policy_targets(s, consumer_jobs),
         *([spark.metrics_policy_target()] if jobs else [])], broker_https=bool(s.jmxAgentUrl),
        kube_api=api_server_egress() if cluster.gated(top) else None)
    tls.restart_on_new_trust([*registry_service, *extras, *spark_apps, *consumers],
                             certs.ca_cert_pem)

    gated = cluster.gated(top)
    kafka_cluster = ClusterManifests(
        secrets, kafka, sts, storage.patches(s, top), quorum.formed_config_map(top),
        roller.minutes(top), roller_objects if gated else [], roll_job if gated else None,
        f"job-{top.statefulset}-roll")
    exports = {
        "namespace": top.namespace,
        "bootstrap": top.bootstrap,
        quorum.OUTPUT: top.brokers,  # what the next up's quorum guard compares with
        "initialControllers": founders,
        "image": s.broker_image,
        storage.OUTPUT: s.storageSize,  # what the next up's guard compares with
        "adminPassword": creds.admin,
        "principalPasswords": pulumi.Output.secret(creds.principals),
        "caCertPem": certs.ca_cert_pem,
        **({tls.GENERATION_OUTPUT: s.caGeneration, tls.TRUST_OUTPUT: s.ca_trust}
           if s.tlsMode == "self-signed" else {}),  # what the next up's rollover guard reads
        "reconcilerJob": apply_job[1]["metadata"]["name"],
        "schemaRegistryUrl": f"http://schema-registry.{top.namespace}.svc:"
                             f"{schema_registry.PORT}" if s.schemaRegistry else None,
        "sparkApplications": [j.name for j in jobs],
        "consumerJobs": [j.name for j in consumer_jobs],
        "alertmanagerUrl": f"http://{monitoring.ALERTMANAGER}.{top.namespace}.svc:"
                           f"{monitoring.ALERTMANAGER_PORT}" if routing_key is not None else None,
        "monitoringSources": files.sources,
    }
    return Stack(top, kafka_cluster, apply_job, registry_service,
                 MonitoringManifests(extras, operators, dashboards, consumers),
                 spark_rbac, spark_apps, policies, exports)


def namespace(s: StackSettings, gate: Gate) -> tuple[list[pulumi.Resource], pulumi.Output]:
    """The namespace (at the stack's root: everything lives in it) and the cluster id.

    `pulumi destroy` leaves the namespace: the brokers' volumes (retained by the
    StatefulSet) live in it, and a later `up` finds them and carries on from their data."""
    ns = ([k8s.apply(cluster.namespace(s), gate.after(retain_on_delete=True))]
          if s.createNamespace else [])
    uid = (ns[0] if ns else k8s.get("v1", "Namespace", s.namespace)).metadata.uid
    return ns, cluster_id(s, uid)


def cluster_id_secret(top: Topology, cid: pulumi.Output) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": broker.CLUSTER_ID_SECRET, "namespace": top.namespace},
            "stringData": pulumi.Output.secret({broker.CLUSTER_ID_KEY: cid})}


def main(root: Path = ROOT,
         target: Callable[[], preflight.ClusterFacts | None] = preflight.read_cluster) -> None:
    """`target`: what the target cluster has (infra/preflight.py); tests give their own."""
    s = from_pulumi()
    gate = guards(s, Topology.of(s))
    stack = render(s, root, gate)
    plain = [policy.plainify(m) for m in stack.checked()]
    violations = policy.check(plain, s.environment, s.requireDigests)
    if violations:
        raise policy.PolicyViolation(violations)
    # Before anything is registered: a cluster that cannot run these fails the preview in
    # seconds, not `up` after its rollout timeout.
    preflight.check(target(), plain)

    ns, cid = namespace(s, gate)
    stack.cluster.secrets.append(cluster_id_secret(stack.top, cid))
    NetworkPolicies("network-policies", stack.policies, gate, ns)  # before the first pod
    kafka = KafkaCluster("kafka-cluster", stack.cluster, gate, ns)
    registry = Reconciler("reconciler", stack.reconciler, gate, kafka)
    kafka.roll(registry)
    if stack.schema_registry:
        SchemaRegistry("schema-registry", stack.schema_registry, gate, kafka)
    Monitoring("monitoring", stack.monitoring, gate, ns, kafka, registry)
    if stack.spark_apps or stack.spark_rbac:
        SparkJobs("spark-jobs", stack.spark_rbac, stack.spark_apps, gate, ns, registry)

    for name, value in stack.exports.items():
        pulumi.export(name, value)
    pulumi.export("clusterId", cid)
