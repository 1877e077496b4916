"""NetworkPolicy semantics, evaluated: who may reach which port of which pod."""

from __future__ import annotations

import ipaddress

import pytest
import yaml

from .infra_helpers import obj, of_kind, render

BROKER = obj(render("prod"), "StatefulSet", "kafka")["spec"]["template"]["metadata"]["labels"]
APP = {"app": "some-service"}


def _peer_matches(peer: dict, policy_ns: str, src_ns: str, src_labels: dict,
                  ip: str | None = None) -> bool:
    if "ipBlock" in peer:  # addresses only: no pod or namespace is one
        return ip is not None and ipaddress.ip_address(ip) in ipaddress.ip_network(
            peer["ipBlock"]["cidr"])
    if "namespaceSelector" in peer:
        exprs = peer["namespaceSelector"].get("matchExpressions", [])
        ok = all(src_ns in e["values"] for e in exprs if e["key"] == "kubernetes.io/metadata.name")
        labels = peer["namespaceSelector"].get("matchLabels", {})
        ok = ok and all(k == "kubernetes.io/metadata.name" and v == src_ns for k, v in labels.items())
    else:
        ok = src_ns == policy_ns  # a podSelector-only peer means the policy's own namespace
    if ok and "podSelector" in peer:
        ok = all(src_labels.get(k) == v for k, v in peer["podSelector"].get("matchLabels", {}).items())
    return ok


def allowed(policies: list[dict], ns: str, pod: dict, port: int, src_ns: str,
            src_labels: dict) -> bool:
    """Kubernetes semantics: isolated if any policy selects the pod; then allowed if any
    rule of any selecting policy admits the source on that port."""
    selecting = [p for p in policies if p["metadata"]["namespace"] == ns and all(
        pod.get(k) == v for k, v in p["spec"]["podSelector"].get("matchLabels", {}).items())]
    if not selecting:
        return True
    for p in selecting:
        for rule in p["spec"].get("ingress", []):
            ports = [x["port"] for x in rule.get("ports", [])]
            if ports and port not in ports:
                continue
            if not rule.get("from") or any(
                    _peer_matches(peer, ns, src_ns, src_labels) for peer in rule["from"]):
                return True
    return False


@pytest.fixture(scope="module", params=["dev", "prod"])
def policies(request):
    return of_kind(render(request.param), "NetworkPolicy")


@pytest.mark.parametrize(("port", "src_ns", "src", "ok"), [
    (9093, "hanzo", APP, True),  # clients in the hanzo namespace
    (9093, "default", APP, False),  # anyone else: no
    (9093, "monitoring", APP, False),
    (9094, "hanzo", APP, False),  # inter-broker: not for clients
    (9095, "hanzo", APP, False),  # controller: not for clients
    (9094, "hanzo", BROKER, True),  # between brokers
    (9095, "hanzo", BROKER, True),
    (9095, "other", BROKER, False),  # broker labels in another namespace do not count
    (9404, "monitoring", APP, True),  # JMX metrics: Prometheus only
    (9404, "hanzo", APP, False),
    (9092, "hanzo", APP, False),  # nothing else is open
])
def test_broker_ports(policies, port, src_ns, src, ok):
    assert allowed(policies, "hanzo", BROKER, port, src_ns, src) is ok


def test_every_platform_pod_is_isolated(policies):
    """The default deny selects every pod we run (part-of label), with no ingress."""
    (deny,) = [p for p in policies if p["metadata"]["name"] == "hanzo-stream-default-deny"]
    assert deny["spec"]["podSelector"]["matchLabels"] == {"app.kubernetes.io/part-of": "hanzo-stream"}
    assert deny["spec"]["ingress"] == [] and deny["spec"]["policyTypes"] == ["Ingress"]
    rendered = render("prod")
    for kind in ("Deployment", "Job", "StatefulSet"):
        for m in of_kind(rendered, kind):
            labels = m["spec"]["template"]["metadata"]["labels"]
            assert labels["app.kubernetes.io/part-of"] == "hanzo-stream"
            assert not allowed(policies, "hanzo", labels, 12345, "default", APP)


def test_schema_registry_and_exporter(policies):
    sr = obj(render("prod"), "Deployment", "schema-registry")["spec"]["template"]["metadata"]["labels"]
    assert allowed(policies, "hanzo", sr, 8081, "hanzo", APP)
    assert not allowed(policies, "hanzo", sr, 8081, "default", APP)
    ex = obj(render("prod"), "Deployment", "kafka-exporter")["spec"]["template"]["metadata"]["labels"]
    assert allowed(policies, "hanzo", ex, 9308, "monitoring", APP)
    assert not allowed(policies, "hanzo", ex, 9308, "hanzo", APP)


def test_spark_pods_talk_only_to_spark_pods(policies):
    app = render("prod")
    driver = next(m for m in of_kind(app, "Deployment") if m["spec"]["template"]["metadata"][
        "labels"].get("hanzo.ai/spark-role") == "driver")["spec"]["template"]["metadata"]["labels"]
    template = yaml.safe_load(next(m for m in of_kind(app, "ConfigMap")
                                   if m["metadata"]["name"].endswith("-executor-template"))[
        "data"]["executor.yaml"])
    executor = template["metadata"]["labels"]
    assert allowed(policies, "hanzo", driver, 7078, "hanzo", executor)  # executors dial back
    assert allowed(policies, "hanzo", executor, 7079, "hanzo", driver)  # shuffle, block manager
    assert not allowed(policies, "hanzo", driver, 7078, "hanzo", APP)


def test_client_namespaces_setting_widens_only_the_client_port():
    ps = of_kind(render("prod", (("clientNamespaces", '["hanzo", "hanzo-batch"]'),)),
                 "NetworkPolicy")
    assert allowed(ps, "hanzo", BROKER, 9093, "hanzo-batch", APP)
    assert not allowed(ps, "hanzo", BROKER, 9095, "hanzo-batch", APP)


def test_the_platforms_own_pods_reach_the_client_port_whatever_client_namespaces_says():
    """The brokers' own sidecars (roll gate, tls-reload), the reconciler, the exporter and the
    jobs live in the platform's namespace: a clientNamespaces without it must not cut them off
    (every broker would stay unready behind its roll gate)."""
    ps = of_kind(render("prod", (("clientNamespaces", '["apps"]'),)), "NetworkPolicy")
    assert allowed(ps, "hanzo", BROKER, 9093, "apps", APP)
    assert allowed(ps, "hanzo", BROKER, 9093, "hanzo", BROKER)
    assert allowed(ps, "hanzo", BROKER, 9093, "hanzo", APP)
    assert not allowed(ps, "hanzo", BROKER, 9093, "elsewhere", APP)


def egress_allowed(policies: list[dict], ns: str, pod: dict, port: int, dst_ns: str,
                   dst_labels: dict, protocol: str = "TCP", ip: str | None = None) -> bool:
    """Kubernetes semantics for egress: restricted if any Egress policy selects the pod; then
    allowed if any rule admits the destination (no `to`: anywhere) on that port."""
    selecting = [p for p in policies if "Egress" in p["spec"]["policyTypes"]
                 and p["metadata"]["namespace"] == ns and all(
                     pod.get(k) == v for k, v in p["spec"]["podSelector"]["matchLabels"].items())]
    if not selecting:
        return True
    for p in selecting:
        for rule in p["spec"]["egress"]:
            ports = [(x.get("protocol", "TCP"), x["port"]) for x in rule.get("ports", [])]
            if ports and (protocol, port) not in ports:
                continue
            if not rule.get("to") or any(_peer_matches(peer, ns, dst_ns, dst_labels, ip)
                                         for peer in rule["to"]):
                return True
    return False


@pytest.mark.parametrize(("port", "protocol", "dst_ns", "dst", "ok"), [
    (53, "UDP", "kube-system", {"k8s-app": "kube-dns"}, True),  # DNS
    (53, "TCP", "kube-system", {"k8s-app": "kube-dns"}, True),
    (9093, "TCP", "hanzo", BROKER, True),  # the roll gate reads metadata from the others
    (9094, "TCP", "hanzo", BROKER, True),  # replication
    (9095, "TCP", "hanzo", BROKER, True),  # the quorum
    (9093, "TCP", "hanzo", APP, False),  # not any pod's port 9093
    (443, "TCP", "default", {"component": "apiserver"}, False),  # no API server, no internet
    (5432, "TCP", "hanzo", APP, False),
])
def test_a_broker_reaches_only_dns_and_the_other_brokers(policies, port, protocol, dst_ns, dst, ok):
    assert egress_allowed(policies, "hanzo", BROKER, port, dst_ns, dst, protocol) is ok


def test_the_roll_gate_reaches_the_api_server_at_its_own_address_only():
    """prod runs the roll gate, which reads its StatefulSet: the brokers may reach the API
    server's endpoint (the render's stand-in for the cluster's `kubernetes` EndpointSlice:
    192.168.49.2:8443), nothing else on that port; dev (one broker, no gate) not even that."""
    prod = of_kind(render("prod"), "NetworkPolicy")
    assert egress_allowed(prod, "hanzo", BROKER, 8443, "", {}, ip="192.168.49.2")
    assert not egress_allowed(prod, "hanzo", BROKER, 8443, "", {}, ip="192.168.49.3")
    assert not egress_allowed(prod, "hanzo", BROKER, 443, "", {}, ip="192.168.49.2")
    dev = of_kind(render("dev"), "NetworkPolicy")
    assert not egress_allowed(dev, "hanzo", BROKER, 8443, "", {}, ip="192.168.49.2")


def test_an_api_server_endpoint_without_address_or_port_is_refused_not_opened():
    """An empty `to` or `ports` in an egress rule admits every destination: refuse instead,
    naming the object to look at."""
    from infra.network import api_server_rule

    ports = [{"name": "https", "port": 8443, "protocol": "TCP"}]
    assert api_server_rule([{"addresses": ["10.0.0.1"]}], ports)["to"] == [
        {"ipBlock": {"cidr": "10.0.0.1/32"}}]
    for endpoints, ports_, missing in (([], ports, "address"),
                                       ([{"addresses": []}], ports, "address"),
                                       ([{"addresses": ["10.0.0.1"]}], [], "port")):
        with pytest.raises(ValueError, match=f"default/kubernetes lists no API server {missing}"):
            api_server_rule(endpoints, ports_)


def test_other_pods_egress_is_not_restricted(policies):
    assert egress_allowed(policies, "hanzo", APP, 443, "default", {})


def test_a_jmx_agent_download_opens_https_for_the_brokers_only_then():
    sets = (("jmxAgentUrl", "https://mirror.example.com/agent.jar"),
            ("initImage", "docker.io/curlimages/curl:8.11.1"))
    pols = of_kind(render("prod", sets), "NetworkPolicy")
    assert egress_allowed(pols, "hanzo", BROKER, 443, "internet", {})
    assert not egress_allowed(pols, "hanzo", BROKER, 80, "internet", {})


def test_the_spark_drivers_metrics_are_for_prometheus_only(policies):
    app = render("prod")
    drivers = [m for m in of_kind(app, "Deployment")
               if m["spec"]["template"]["metadata"]["labels"].get("hanzo.ai/spark-role") == "driver"]
    assert drivers
    for d in drivers:
        tpl = d["spec"]["template"]
        c = tpl["spec"]["containers"][0]
        port = next(p["containerPort"] for p in c["ports"] if p["name"] == "metrics")
        assert tpl["metadata"]["annotations"]["prometheus.io/port"] == str(port)
        assert {"name": "HANZO_STREAM_METRICS_LISTEN", "value": f"0.0.0.0:{port}"} in c["env"]
        labels = tpl["metadata"]["labels"]
        assert allowed(policies, "hanzo", labels, port, "monitoring", APP)
        assert not allowed(policies, "hanzo", labels, port, "hanzo", APP)
