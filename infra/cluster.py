"""The KRaft cluster: StatefulSet, headless and client Services, PodDisruptionBudget.

Combined mode: every pod is broker and controller, node id = pod ordinal, every pod is
(or becomes) a voter. Pods start in parallel (a quorum needs them all), keep their volumes
when the StatefulSet is deleted or scaled down, and spread across nodes when there are 3+.

With 3+ brokers each pod has a `join-quorum` sidecar (broker.join_script): pods added to a
running stack start as observers and the sidecar makes them voters; the pod is ready only
once it is a voter, so the PodDisruptionBudget and the StatefulSet's rolling update count a
pod that is still joining as unavailable. Why in every pod and not only the joining ones:
which pods join depends on the quorum's recorded founding size, a value Pulumi knows only
after the first deployment, while the pod template must be plain data at preview (policy
checks, schema validation); in a founding pod the sidecar finds itself among the voters
and only marks the pod ready. A one-broker stack has no sidecar: its one pod founds the
quorum, and growing it changes the pod template anyway.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from hanzo_stream.core.broker_config import Replication
from hanzo_stream.pods.in_cluster import SA_DIR
from hanzo_stream.pods.roll_gate import ALIVE, IN_SYNC, SAFE

from . import broker, roller, security_context
from .broker import Flavor, Paths, Rendered
from .credentials import ADMIN, user_secret
from .reconciler import connection_env
from .settings import JMX_AGENT_IN_IMAGE, StackSettings
from .tls import CA_MOUNT, ca_volume
from .topology import PORTS, Topology, labels

SERVICE_ACCOUNT = "kafka"


@dataclass(frozen=True)
class JmxRules:
    file_name: str
    text: str
    config_map: str = "kafka-jmx-rules"


LEGACY_PORT_NAME = "legacy"


def _port(name: str, number: int | None = None) -> dict:
    return {"name": name, "containerPort": number or PORTS[name], "protocol": "TCP"}


def broker_ports(top: Topology) -> list[dict]:
    ports = [_port("client"), _port("internal"), _port("controller"), _port("metrics")]
    if top.legacy_port:
        ports.append(_port(LEGACY_PORT_NAME, top.legacy_port))
    return ports


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def pdb_max_unavailable(brokers: int) -> int:
    """How many brokers may be down for maintenance without losing writes (acks=all)."""
    rep = Replication.for_cluster(brokers)
    return max(1, rep.default_replication_factor - rep.min_insync_replicas)


RESTRICTED = security_context.container()


def join_container(s: StackSettings, top: Topology, flavor: Flavor, paths: Paths = Paths()) -> dict:
    """The sidecar that makes its pod a voter (broker.join_script), from the broker image.

    It reads the pod's server.properties and meta.properties (read-only mounts of the run
    directory and the data volume) and logs in as the admin, whose JAAS line comes from the
    kafka-admin Secret by secretKeyRef. Ready = this pod is a voter."""
    return {
        "name": "join-quorum",
        "image": s.broker_image,
        "command": ["/bin/sh", "-c", broker.join_script(flavor, top, paths)],
        "env": [
            {"name": broker.ADMIN_JAAS_ENV, "valueFrom": {"secretKeyRef": {
                "name": user_secret(ADMIN), "key": "sasl.jaas.config"}}},
            {"name": "KAFKA_HEAP_OPTS", "value": "-Xms32m -Xmx128m"},  # a CLI, not a broker
            {"name": "LOG_DIR", "value": paths.join_dir},  # kafka-run-class.sh mkdirs it
            *broker.java_opts_env(s.javaOptions),
        ],
        "readinessProbe": {"exec": {"command": [
            "/bin/sh", "-c", f"test -f {paths.join_dir}/{broker.VOTER_MARKER}"]},
            "periodSeconds": 10},
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"},
                      "limits": {"cpu": "500m", "memory": "384Mi"}},
        "securityContext": RESTRICTED,
        "volumeMounts": [
            {"name": top.data_volume, "mountPath": paths.data_dir, "readOnly": True},
            {"name": "tls", "mountPath": paths.tls_dir, "readOnly": True},
            {"name": "run", "mountPath": paths.run_dir, "readOnly": True},
            {"name": "join", "mountPath": paths.join_dir},
        ],
    }


def gated(top: Topology) -> bool:
    """A quorum of 3+ brokers rolls through the roll gate; 1 broker has nothing to wait for."""
    return top.brokers >= 3


GATE_DIR = Paths.gate_dir  # the roll gate's verdicts, shared with kafka
STOP_WAIT_SECONDS = 180  # how long a deleted broker waits for the gate before it stops anyway


def _fresh(path: str, seconds: int) -> str:
    """sh: `path` exists and was rewritten in the last `seconds` (the gate writes every 5 s)."""
    return (f'[ -f {path} ] && [ $(( $(date +%s) - $(stat -c %Y {path}) )) -lt {seconds} ]')


def sidecar_admin_env(top: Topology) -> list[dict]:
    """The brokers' Python sidecars log in as the admin and bootstrap from every pod's own
    address: the client Service lists only Ready pods, and the roll gate decides readiness."""
    return connection_env(top, ADMIN, bootstrap=",".join(f"{n.host}:{n.client_port}"
                                                          for n in top.nodes))


def roll_gate_container(s: StackSettings, top: Topology) -> dict:
    """The roll gate as a native sidecar (an init container that restarts Always): it starts
    before the broker and, unlike a regular container, keeps running until the broker has
    stopped, so the broker's preStop hook can wait for its verdict. Ready = this broker's
    replicas are all in their ISR; see hanzo_stream/pods/roll_gate.py. It alone in the pod has a
    service account token, to read its StatefulSet (roll_gate_rbac): a set being deleted
    releases every held stop."""
    return {
        "name": "roll-gate",
        "image": s.reconcilerImage,
        "restartPolicy": "Always",
        "command": ["python", "-m", "hanzo_stream.pods.roll_gate", "--dir", GATE_DIR],
        "env": [*sidecar_admin_env(top), {"name": "STATEFULSET", "value": top.statefulset}],
        "readinessProbe": {"exec": {"command": [
            "/bin/sh", "-c", _fresh(f"{GATE_DIR}/{IN_SYNC}", 30)]}, "periodSeconds": 5},
        "livenessProbe": {"exec": {"command": [
            "/bin/sh", "-c", _fresh(f"{GATE_DIR}/{ALIVE}", 90)]},
            "initialDelaySeconds": 60, "periodSeconds": 30},
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"},
                      "limits": {"cpu": "200m", "memory": "192Mi"}},
        "securityContext": RESTRICTED,
        "volumeMounts": [{"name": "gate", "mountPath": GATE_DIR},
                         {"name": "kafka-ca", "mountPath": CA_MOUNT, "readOnly": True},
                         {"name": KUBE_API_VOLUME, "mountPath": str(SA_DIR), "readOnly": True}],
    }


def tls_reload_container(s: StackSettings, top: Topology, paths: Paths = Paths()) -> dict:
    """Serves a renewed certificate without a restart (hanzo_stream/pods/tls_reload.py): when the
    mounted TLS Secret changes (cert-manager, or `pulumi up` renewing the self-signed one), it
    checks the new pair, writes it over the broker's copy in the shared run directory and asks
    its broker to re-read its stores. A per-broker config change needs the admin."""
    return {
        "name": "tls-reload",
        "image": s.reconcilerImage,
        "command": ["python", "-m", "hanzo_stream.pods.tls_reload", "--tls-dir", paths.tls_dir,
                    "--keystore", paths.keystore, "--properties", paths.properties],
        "env": sidecar_admin_env(top),
        "resources": {"requests": {"cpu": "5m", "memory": "64Mi"},
                      "limits": {"cpu": "200m", "memory": "192Mi"}},
        "securityContext": RESTRICTED,
        "volumeMounts": [{"name": "tls", "mountPath": paths.tls_dir, "readOnly": True},
                         {"name": "run", "mountPath": paths.run_dir},
                         {"name": "kafka-ca", "mountPath": CA_MOUNT, "readOnly": True}],
    }


KUBE_API_VOLUME = "kube-api-token"


def kube_api_volume() -> dict:
    """What automountServiceAccountToken would mount, as a volume only the roll gate mounts:
    the broker and the quorum sidecar get no token."""
    return {"name": KUBE_API_VOLUME, "projected": {"defaultMode": 0o440, "sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
                                    "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}}


def roll_gate_rbac(top: Topology) -> list[dict]:
    """The roll gate may read its own StatefulSet, and nothing else."""
    name = f"{top.statefulset}-roll-gate"
    meta = {"name": name, "namespace": top.namespace, "labels": top.broker_labels}
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
         "rules": [{"apiGroups": ["apps"], "resources": ["statefulsets"],
                    "resourceNames": [top.statefulset], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT,
                       "namespace": top.namespace}]},
    ]


def wait_for_gate() -> dict:
    """The broker's preStop: stop only when the gate says no partition would fall under min
    ISR without this broker (a roll, a drain, a delete alike), or after STOP_WAIT_SECONDS."""
    return {"exec": {"command": ["/bin/sh", "-c", (
        f"end=$(( $(date +%s) + {STOP_WAIT_SECONDS} )); "
        f"until {_fresh(f'{GATE_DIR}/{SAFE}', 30)} || [ $(date +%s) -ge $end ]; "
        "do sleep 2; done")]}}


def jmx_agent_init(s: StackSettings, paths: Paths = Paths()) -> dict:
    """The init container that puts the JMX exporter agent into the pod's emptyDir, checked
    against jmxAgentSha256. By default it copies the jar from its own image (the reconciler
    image carries it): no network at broker start. Only an explicit jmxAgentUrl downloads it
    (with curl, from an initImage that has it; settings refuses the URL without one)."""
    if s.jmxAgentUrl:
        source = {"name": "URL", "value": s.jmxAgentUrl}
        fetch = 'curl -fsSL --retry 5 -o "$DEST.part" "$URL"'
    else:
        source = {"name": "SOURCE", "value": JMX_AGENT_IN_IMAGE}
        fetch = 'cp "$SOURCE" "$DEST.part"'
    return {
        "name": "jmx-agent",
        "image": s.initImage or s.reconcilerImage,
        "command": ["/bin/sh", "-c", f'set -eu; {fetch}; echo "$SHA256  $DEST.part" | '
                    'sha256sum -c -; mv "$DEST.part" "$DEST"'],
        "env": [source, {"name": "SHA256", "value": s.jmxAgentSha256},
                {"name": "DEST", "value": f"{paths.jmx_dir}/jmx_prometheus_javaagent.jar"}],
        "volumeMounts": [{"name": "jmx-agent", "mountPath": paths.jmx_dir}],
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"},
                      "limits": {"cpu": "200m", "memory": "64Mi"}},
        "securityContext": RESTRICTED,
    }


def statefulset(s: StackSettings, top: Topology, flavor: Flavor, r: Rendered, jmx: JmxRules,
                annotations: dict[str, Any], paths: Paths = Paths(),
                script: Any = None) -> dict:
    """The broker StatefulSet. `script`: the broker container's entrypoint when it depends on a
    value known only at deployment (the recorded founding size); default: rendered from `r`."""
    env = broker.container_env(flavor, r, s.heapOpts, broker.jmx_opts(paths, jmx.file_name),
                               s.javaOptions)
    sel = top.broker_labels
    if script is None:
        script = broker.entrypoint(flavor, top, r, paths)
    pod_spec: dict[str, Any] = {
        "serviceAccountName": SERVICE_ACCOUNT,
        "priorityClassName": priority_class_name(top),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,  # service env vars would collide with KAFKA_* names
        "terminationGracePeriodSeconds": 120,  # room for a controlled shutdown
        "securityContext": security_context.pod(s.brokerUid or flavor.uid,
                                                fsGroupChangePolicy="OnRootMismatch"),
        "initContainers": [jmx_agent_init(s, paths)],
        "containers": [{
            "name": "kafka",
            "image": s.broker_image,
            "command": ["/bin/sh", "-c", script],
            "env": env,
            "ports": broker_ports(top),
            "resources": {"requests": {"cpu": s.cpuRequest, "memory": s.memoryRequest},
                          "limits": {"cpu": s.cpuLimit, "memory": s.memoryLimit}},
            # Ready = serving clients; alive = the controller listener answers. The startup
            # probe gives a new pod time to wait for kafka-0 and replay its log.
            "startupProbe": {"tcpSocket": {"port": "controller"}, "periodSeconds": 5,
                             "failureThreshold": 120},
            "readinessProbe": {"tcpSocket": {"port": "client"}, "periodSeconds": 10,
                               "timeoutSeconds": 5, "failureThreshold": 3},
            "livenessProbe": {"tcpSocket": {"port": "controller"}, "periodSeconds": 20,
                              "timeoutSeconds": 5, "failureThreshold": 6},
            "securityContext": RESTRICTED,
            "volumeMounts": [
                {"name": top.data_volume, "mountPath": paths.data_dir},
                {"name": "tls", "mountPath": paths.tls_dir, "readOnly": True},
                {"name": "run", "mountPath": paths.run_dir},
                {"name": "jmx-agent", "mountPath": paths.jmx_dir, "readOnly": True},
                {"name": "jmx-rules", "mountPath": paths.jmx_rules_dir, "readOnly": True},
                {"name": "tmp", "mountPath": "/tmp"},
            ],
        }, tls_reload_container(s, top, paths)],
        "volumes": [
            {"name": "tls", "secret": {"secretName": broker.TLS_SECRET, "defaultMode": 0o440}},
            {"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
            {"name": "jmx-agent", "emptyDir": {"sizeLimit": "16Mi"}},
            {"name": "jmx-rules", "configMap": {"name": jmx.config_map}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
            ca_volume(),
        ],
    }
    if gated(top):
        pod_spec["containers"].append(join_container(s, top, flavor, paths))
        pod_spec["initContainers"].append(roll_gate_container(s, top))
        kafka = pod_spec["containers"][0]
        kafka["lifecycle"] = {"preStop": wait_for_gate()}
        kafka["volumeMounts"].append({"name": "gate", "mountPath": GATE_DIR, "readOnly": True})
        pod_spec["terminationGracePeriodSeconds"] = STOP_WAIT_SECONDS + 120
        pod_spec["volumes"] += [
            {"name": "join", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
            {"name": "gate", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
            kube_api_volume()]
        term = {"labelSelector": {"matchLabels": sel}, "topologyKey": "kubernetes.io/hostname"}
        pod_spec["affinity"] = {"podAntiAffinity": (
            {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
            if s.brokerAntiAffinity == "required" else
            {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": term}]})}
        pod_spec["topologySpreadConstraints"] = [{
            "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": sel}}]
    claim: dict[str, Any] = {"accessModes": ["ReadWriteOnce"],
                             "resources": {"requests": {"storage": s.storageSize}}}
    if s.storageClass:
        claim["storageClassName"] = s.storageClass
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": top.statefulset, "namespace": top.namespace, "labels": sel},
        "spec": {
            "serviceName": top.headless,
            "replicas": top.brokers,
            "podManagementPolicy": "Parallel",
            "updateStrategy": roller.strategy(gated(top)),
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain",
                                                     "whenScaled": "Retain"},
            "selector": {"matchLabels": sel},
            "template": {"metadata": {"labels": sel, "annotations": {
                "hanzo.ai/jmx-rules-sha": _sha(jmx.text), **annotations}}, "spec": pod_spec},
            # Immutable: the program ignores later changes to them (storage.py resizes the claims).
            "volumeClaimTemplates": [{"metadata": {"name": top.data_volume, "labels": sel},
                                      "spec": claim}],
        },
    }


def services(top: Topology) -> list[dict]:
    sel = top.broker_labels

    def svc_port(name: str, number: int | None = None) -> dict:
        return {"name": name, "port": number or PORTS[name], "targetPort": name, "protocol": "TCP"}

    ports = [svc_port("client"), svc_port("internal"), svc_port("controller")]
    if top.legacy_port:  # the old clients dial <pod>.<headless>:<port>
        ports.append(svc_port(LEGACY_PORT_NAME, top.legacy_port))
    headless = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": top.headless, "namespace": top.namespace, "labels": sel},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": sel,
                 "ports": ports},
    }
    client = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": top.client_service, "namespace": top.namespace, "labels": sel},
        "spec": {"type": "ClusterIP", "selector": sel, "ports": [svc_port("client")]},
    }
    return [headless, client]


def pdb(top: Topology) -> dict:
    return {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": top.statefulset, "namespace": top.namespace,
                     "labels": top.broker_labels},
        "spec": {"maxUnavailable": pdb_max_unavailable(top.brokers),
                 "selector": {"matchLabels": top.broker_labels}},
    }


def priority_class_name(top: Topology) -> str:
    """Cluster-scoped, so named after the namespace: stacks sharing a cluster never collide."""
    return f"hanzo-stream-{top.namespace}-broker"


def priority_class(top: Topology) -> dict:
    """Brokers come before ordinary workloads when a node runs short: a broker evicted or
    left Pending for an application pod costs every producer its acks=all writes."""
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": priority_class_name(top), "labels": top.broker_labels},
            "value": 1_000_000, "globalDefault": False,
            "preemptionPolicy": "PreemptLowerPriority",
            "description": f"Kafka brokers of hanzo-stream in namespace {top.namespace}"}


def service_account(top: Topology) -> dict:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": SERVICE_ACCOUNT, "namespace": top.namespace,
                         "labels": top.broker_labels},
            "automountServiceAccountToken": False}


def jmx_config_map(top: Topology, jmx: JmxRules) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": jmx.config_map, "namespace": top.namespace,
                         "labels": labels("monitoring", jmx.config_map)},
            "data": {jmx.file_name: jmx.text}}


def namespace(s: StackSettings) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": s.namespace, "labels": {
                "app.kubernetes.io/part-of": "hanzo-stream",
                # Pod Security Admission: our own pods meet `restricted`; enforce `baseline`
                # so pods made by operators (Spark) are not refused, warn on the rest.
                "pod-security.kubernetes.io/enforce": "baseline",
                "pod-security.kubernetes.io/warn": "restricted"}}}
