"""The Pulumi program: read the stack's settings and the registry, render, check, register.

Everything is rendered to manifests first; the policy checks run on them before any
resource is registered, so a stack that breaks the standard fails at `pulumi preview`.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from pathlib import Path

import pulumi

from hanzo_stream import tls_reload
from hanzo_stream.broker_config import kraft_uuid
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


def main(root: Path = ROOT,
         target: Callable[[], preflight.ClusterFacts | None] = preflight.read_cluster) -> None:
    """`target`: what the target cluster has (infra/preflight.py); tests give their own."""
    s = from_pulumi()
    registry_file = root / "topics.yaml"
    registry = load_registry(registry_file)
    top = Topology.of(s)
    flavor = broker.FLAVORS[s.imageFlavor]
    if top.legacy_port and registry.legacy is None:
        raise policy.PolicyViolation([policy.legacy_window_missing(registry_file)])

    def render(founders: int | None = None) -> broker.Rendered:
        return broker.render(top, s.brokerConfigOverrides, founders=founders,
                             switch=s.takeoverSwitch, legacy_port=top.legacy_port,
                             rack_label=s.rackLabel)

    rendered = render()
    files = monitoring.discover(root)
    jobs = spark.discover(root, registry) if s.spark else []
    consumer_jobs = monitoring.consumer_jobs(root, registry)

    # A storageSize the volumes cannot take, fewer brokers than the quorum has voters, or a CA
    # rollover step skipped stops the update before any Kubernetes object or certificate
    # changes: every one of them waits for the guards (infra/storage.py, quorum.py, tls.py).
    last = storage.last_deployment()
    gate = pulumi.Output.all(storage.guard(s, top, last), quorum.guard(s, last),
                             tls.guard(s, last))

    def after(*deps: pulumi.Resource) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(depends_on=gate.apply(lambda _: list(deps)))

    creds = credentials.generate(registry)
    certs = tls.build(s, top, after())
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
    script = founders.apply(lambda n: broker.entrypoint(flavor, top, render(n)))
    sts = cluster.statefulset(s, top, flavor, rendered, files.jmx, annotations, script=script)
    kafka = [cluster.priority_class(top), cluster.service_account(top), *cluster.services(top),
             cluster.pdb(top),
             cluster.jmx_config_map(top, files.jmx),
             *(cluster.roll_gate_rbac(top) if cluster.gated(top) else [])]
    apply_job = reconciler.manifests(s, top, registry_file.read_text(), creds.digest())
    # A 3+ broker StatefulSet is OnDelete: the roller restarts its brokers (infra/roller.py).
    roll_job = roller.job(s, top, roller.template_digest(sts["spec"]["template"]))
    roller_objects = [*roller.rbac(top), roller.restart_cronjob(s, top)] if cluster.gated(top) else []
    extras = []
    if s.schemaRegistry:
        extras += schema_registry.manifests(s, top)
    extras += monitoring.exporter(s, top)
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

    tls.restart_on_new_trust([*extras, *spark_apps, *consumers], certs.ca_cert_pem)
    everything = [sts, *kafka, *apply_job, *extras, *policies, *spark_apps, *consumers,
                  *([roll_job, *roller_objects] if cluster.gated(top) else [])]
    plain = [policy.plainify(m) for m in everything]
    violations = policy.check(plain, s.environment, s.requireDigests)
    if violations:
        raise policy.PolicyViolation(violations)
    # Before anything is registered: a cluster that cannot run these fails the preview in
    # seconds, not `up` after its rollout timeout.
    preflight.check(target(), plain)

    # `pulumi destroy` leaves the namespace: the brokers' volumes (retained by the
    # StatefulSet) live in it, and a later `up` finds them and carries on from their data.
    keep_ns = pulumi.ResourceOptions.merge(after(), pulumi.ResourceOptions(retain_on_delete=True))
    ns = [k8s.apply(cluster.namespace(s), keep_ns)] if s.createNamespace else []
    in_ns = after(*ns)
    uid = (ns[0] if ns else k8s.get("v1", "Namespace", s.namespace)).metadata.uid
    cid = cluster_id(s, uid)
    secrets.append({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": broker.CLUSTER_ID_SECRET, "namespace": top.namespace},
                    "stringData": pulumi.Output.secret({broker.CLUSTER_ID_KEY: cid})})
    for m in policies:  # the deny policy exists before the first pod does
        k8s.apply(m, in_ns)
    secret_res = [k8s.apply(m, in_ns) for m in secrets]
    kafka_res = [k8s.apply(m, in_ns) for m in kafka]
    # A roll restarts one broker at a time and waits for it to be back in sync (the roll
    # gate): the provider's default 10 minutes for the whole rollout is too short for 3+.
    rollout = pulumi.CustomTimeouts(create=f"{roller.minutes(top)}m",
                                    update=f"{roller.minutes(top)}m")
    brokers = k8s.apply(sts, pulumi.ResourceOptions.merge(
        after(*ns, *secret_res, *kafka_res),
        pulumi.ResourceOptions(ignore_changes=storage.IGNORE_ON_STATEFULSET,
                               custom_timeouts=rollout)))
    # The claims exist once the StatefulSet is ready. `destroy` leaves each patch's size on
    # its claim, which the namespace keeps: a patch managing the required storage request
    # cannot be deleted (pulumi destroy failed on it on the real cluster).
    keep_size = pulumi.ResourceOptions.merge(after(brokers),
                                             pulumi.ResourceOptions(retain_on_delete=True))
    for m in storage.patches(s, top):
        k8s.patch(m, keep_size)
    k8s.apply(quorum.formed_config_map(top), after(brokers))  # from now on, blank volumes join
    after_brokers = after(brokers, *secret_res)
    applied = [k8s.apply(m, after_brokers) for m in apply_job]
    if cluster.gated(top):
        # After the registry is applied: a stack grown from one broker restarts its first
        # broker only once its topics are replicated to the new ones (nothing goes offline).
        roller_res = [k8s.apply(m, in_ns) for m in roller_objects]
        k8s.apply(roll_job, pulumi.ResourceOptions.merge(
            after(brokers, *roller_res, *applied),
            pulumi.ResourceOptions(custom_timeouts=rollout)), name=f"job-{top.statefulset}-roll")
    for m in extras:
        k8s.apply(m, after_brokers)
    for m in operators:
        k8s.apply(m, in_ns)
    for m in dashboards:
        k8s.apply(m, after())
    rbac = [k8s.apply(m, in_ns) for m in spark_rbac]
    for m in spark_apps:  # after the reconciler: topics, ACLs and SCRAM users exist
        k8s.apply(m, after(*applied, *rbac))
    for m in consumers:
        k8s.apply(m, after(*applied))

    pulumi.export("namespace", top.namespace)
    pulumi.export("bootstrap", top.bootstrap)
    pulumi.export(quorum.OUTPUT, top.brokers)  # what the next up's quorum guard compares with
    pulumi.export("initialControllers", founders)
    pulumi.export("image", s.broker_image)
    pulumi.export(storage.OUTPUT, s.storageSize)  # what the next up's guard compares with
    pulumi.export("clusterId", cid)
    pulumi.export("adminPassword", creds.admin)
    pulumi.export("principalPasswords", pulumi.Output.secret(creds.principals))
    pulumi.export("caCertPem", certs.ca_cert_pem)
    if s.tlsMode == "self-signed":  # what the next up's rollover guard compares with
        pulumi.export(tls.GENERATION_OUTPUT, s.caGeneration)
        pulumi.export(tls.TRUST_OUTPUT, s.ca_trust)
    pulumi.export("reconcilerJob", apply_job[1]["metadata"]["name"])
    pulumi.export("schemaRegistryUrl", f"http://schema-registry.{top.namespace}.svc:"
                  f"{schema_registry.PORT}" if s.schemaRegistry else None)
    pulumi.export("sparkApplications", [j.name for j in jobs])
    pulumi.export("consumerJobs", [j.name for j in consumer_jobs])
    pulumi.export("alertmanagerUrl", f"http://{monitoring.ALERTMANAGER}.{top.namespace}.svc:"
                  f"{monitoring.ALERTMANAGER_PORT}" if routing_key is not None else None)
    pulumi.export("monitoringSources", files.sources)
