"""NetworkPolicies: deny all ingress to the platform's pods, then open exactly these paths.

- client port 9093 (brokers): from the platform's own namespace and the client namespaces;
  8081 (schema registry): from the client namespaces;
- a taken-over cluster's LEGACY PLAINTEXT port (legacyPlaintextPort): from the namespace's
  own pods only;
- inter-broker 9094 and controller 9095: only from broker pods;
- metrics ports (brokers, exporter, consumer jobs, dead-letter-monitor) and Alertmanager's API:
  only from the monitoring namespace;
- Spark drivers and executors: only from the platform's Spark pods.
The default deny selects pods by `app.kubernetes.io/part-of: hanzo-stream`, so it never
touches other workloads that share the namespace.

Egress is restricted for the brokers, whose needs are known: DNS, and the other brokers'
client, inter-broker and controller ports (the roll gate reads metadata through the client
port); the Kubernetes API server's own addresses when the roll gate runs (it reads its
StatefulSet; the addresses are the `kubernetes` EndpointSlice's, read at deployment); HTTPS
too only when `jmxAgentUrl` has the init container download the agent. A broker that is
taken over cannot reach anything else. The other pods' destinations (S3,
ClickHouse, PagerDuty, the Kubernetes API for Spark) vary per site and are not restricted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .topology import PART_OF, PORTS, Topology, labels

NS_LABEL = "kubernetes.io/metadata.name"  # set by Kubernetes on every namespace
LEGACY_POLICY = "kafka-legacy-plaintext"


def _ns_peer(names: list[str]) -> dict:
    return {"namespaceSelector": {"matchExpressions": [
        {"key": NS_LABEL, "operator": "In", "values": sorted(set(names))}]}}


def _tcp(*ports: int) -> list[dict]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def _policy(top: Topology, name: str, selector: dict, ingress: list[dict]) -> dict:
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": top.namespace, "labels": labels("network", name)},
        "spec": {"podSelector": {"matchLabels": selector}, "policyTypes": ["Ingress"],
                 "ingress": ingress},
    }


def api_server_rule(endpoints: list[dict], ports: list[dict]) -> dict:
    """Egress to the API server's endpoints (the `kubernetes` EndpointSlice's addresses and
    ports: after the Service's DNAT, which is what a NetworkPolicy sees)."""
    cidrs = sorted({f"{a}/{128 if ':' in a else 32}" for e in endpoints for a in e["addresses"]})
    port_numbers = sorted({p["port"] for p in ports if p.get("port")})
    if not cidrs or not port_numbers:  # an empty `to` or `ports` would admit everything
        raise ValueError(
            "EndpointSlice default/kubernetes lists no API server "
            f"{'address' if not cidrs else 'port'}, so the brokers' egress rule to it cannot "
            "be written (an empty rule would allow all egress). Check `kubectl get "
            "endpointslice -n default kubernetes -o yaml`; the API server writes it at start.")
    return {"to": [{"ipBlock": {"cidr": c}} for c in cidrs],
            "ports": _tcp(*port_numbers)}


def broker_egress(top: Topology, https: bool = False, kube_api: Any = None) -> dict:
    """kube_api: api_server_rule's rule (an Output at deployment), when the roll gate runs."""
    brokers = top.broker_labels
    rules = [
        {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},  # DNS
        {"to": [{"podSelector": {"matchLabels": brokers}}],
         "ports": _tcp(PORTS["client"], PORTS["internal"], PORTS["controller"])},
    ]
    if kube_api is not None:
        rules.append(kube_api)
    if https:
        rules.append({"ports": _tcp(443)})
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "kafka-egress", "namespace": top.namespace,
                     "labels": labels("network", "kafka-egress")},
        "spec": {"podSelector": {"matchLabels": brokers}, "policyTypes": ["Egress"],
                 "egress": rules},
    }


def manifests(top: Topology, client_namespaces: list[str], monitoring_namespace: str,
              schema_registry: dict | None, exporter: dict | None,
              spark_selector: dict | None, monitoring_only: Sequence[dict] = (),
              broker_https: bool = False, kube_api: Any = None) -> list[dict]:
    """monitoring_only: {name, selector, port} of pods only the monitoring namespace may reach;
    broker_https: the brokers' init container downloads the JMX agent; kube_api: see
    broker_egress."""
    brokers = top.broker_labels
    out = [
        broker_egress(top, broker_https, kube_api),
        _policy(top, "hanzo-stream-default-deny", {"app.kubernetes.io/part-of": PART_OF}, []),
        # The platform's own pods (brokers' sidecars, reconciler, exporter, jobs) use it too.
        _policy(top, "kafka-client", brokers, [
            {"from": [_ns_peer([top.namespace, *client_namespaces])],
             "ports": _tcp(PORTS["client"])}]),
        _policy(top, "kafka-quorum", brokers, [
            {"from": [{"podSelector": {"matchLabels": brokers}}],
             "ports": _tcp(PORTS["internal"], PORTS["controller"])}]),
        _policy(top, "kafka-metrics", brokers, [
            {"from": [_ns_peer([monitoring_namespace])], "ports": _tcp(PORTS["metrics"])}]),
    ]
    if top.legacy_port:
        # A peer with a podSelector and no namespaceSelector is a pod of this namespace only.
        out.append(_policy(top, LEGACY_POLICY, brokers, [
            {"from": [{"podSelector": {}}], "ports": _tcp(top.legacy_port)}]))
    if schema_registry:
        out.append(_policy(top, "schema-registry", schema_registry["selector"], [
            {"from": [_ns_peer(client_namespaces)], "ports": _tcp(schema_registry["port"])}]))
    if exporter:
        out.append(_policy(top, "kafka-exporter-metrics", exporter["selector"], [
            {"from": [_ns_peer([monitoring_namespace])], "ports": _tcp(exporter["port"])}]))
    for t in monitoring_only:
        out.append(_policy(top, t["name"], t["selector"], [
            {"from": [_ns_peer([monitoring_namespace])], "ports": _tcp(t["port"])}]))
    if spark_selector:
        # Executors call back to their driver and fetch shuffle blocks from each other.
        out.append(_policy(top, "spark-jobs", spark_selector, [
            {"from": [{"podSelector": {"matchLabels": spark_selector}}]}]))
    return out
