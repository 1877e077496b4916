"""The Pulumi program pointed at the standard's running insights-kafka (docs/takeover.md): the
names, volume, uid and quorum the old cluster has, a LEGACY PLAINTEXT port open to the
namespace only, and a broker that refuses a volume that is not the old one's."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from hanzo_stream.core.broker_config import broker_config, jaas_config
from hanzo_stream.pods import takeover
from infra import broker, policy
from infra.settings import SettingsError, parse
from infra.topology import Topology

from .infra_helpers import (
    ROOT,
    RenderFailed,
    broker_statefulset,
    manifests,
    obj,
    of_kind,
    parse_properties,
    render,
    run_pod,
)

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"  # 22 characters of base64url, as meta.properties has it
TAKEOVER = (("statefulSetName", "insights-kafka"), ("headlessServiceName", "insights-kafka"),
            ("clusterId", CLUSTER_ID), ("takeoverSwitch", "true"),
            ("legacyPlaintextPort", "9092"), ("brokerUid", "1001"))
SETTLED = tuple((k, "false" if k == "takeoverSwitch" else v) for k, v in TAKEOVER)


def checkout(tmp: Path, window: bool) -> Path:
    """This checkout, its topics.yaml with (or without) a legacy_plaintext window."""
    for entry in ROOT.iterdir():
        if entry.name not in ("topics.yaml", ".git"):
            (tmp / entry.name).symlink_to(entry)
    text = (ROOT / "topics.yaml").read_text()
    if window:
        until = dt.date.today() + dt.timedelta(days=30)
        text += f"\nlegacy_plaintext:\n  stands_in_for: [llm-gateway]\n  until: {until}\n"
    (tmp / "topics.yaml").write_text(text)
    return tmp


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return checkout(tmp_path_factory.mktemp("checkout"), window=True)


@pytest.fixture(scope="module")
def switch(root) -> dict:
    return render("dev", TAKEOVER, root=root)


def top(sets=TAKEOVER) -> Topology:
    return Topology.of(parse({"environment": "dev", "brokers": 1, **dict(sets)}))


def test_the_stack_takes_the_old_names_volume_and_uid(switch):
    sts = broker_statefulset(switch)
    assert sts["metadata"]["name"] == "insights-kafka"
    assert sts["spec"]["serviceName"] == "insights-kafka"  # insights-kafka-0.insights-kafka.hanzo.svc
    claim = sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"]
    assert f"{claim}-insights-kafka-0" == "data-insights-kafka-0"  # the Bitnami chart's claim
    pod = sts["spec"]["template"]["spec"]["securityContext"]
    assert (pod["runAsUser"], pod["fsGroup"]) == (1001, 1001)  # Bitnami's files stay writable
    headless = obj(switch, "Service", "insights-kafka")["spec"]
    assert headless["clusterIP"] == "None"
    assert {p["name"]: p["port"] for p in headless["ports"]}["legacy"] == 9092
    client = obj(switch, "Service", "kafka")["spec"]
    assert [p["port"] for p in client["ports"]] == [9093]  # LEGACY is for the old addresses only
    ports = {p["name"]: p["containerPort"] for p in sts["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert ports["legacy"] == 9092


def test_legacy_port_is_open_to_the_namespace_only(switch):
    (legacy,) = [p for p in of_kind(switch, "NetworkPolicy")
                 if p["metadata"]["name"] == "kafka-legacy-plaintext"]
    assert legacy["spec"]["ingress"] == [{"from": [{"podSelector": {}}],
                                          "ports": [{"protocol": "TCP", "port": 9092}]}]
    # No other policy admits 9092 from elsewhere: the policy check below proves it (and the
    # next test that it can fail).
    assert policy.check(manifests(switch), "dev") == []


def test_the_policy_refuses_a_legacy_port_open_beyond_the_namespace(switch):
    ms = manifests(switch)
    for m in ms:
        if m.get("kind") == "NetworkPolicy" and m["metadata"]["name"] == "kafka-legacy-plaintext":
            m["spec"]["ingress"][0]["from"] = [{"namespaceSelector": {}}]
    (v,) = policy.check_listeners(ms)
    assert "LEGACY" in v.message and "namespaceSelector" in v.message
    without = [m for m in ms if m["metadata"]["name"] != "kafka-legacy-plaintext"]
    (v,) = policy.check_listeners(without)
    assert "no NetworkPolicy admits port 9092" in v.message


def test_the_switch_runs_the_static_quorum_and_never_formats(switch, tmp_path):
    t = top()
    s = broker.broker_settings(t, 0)
    want = takeover.with_legacy(takeover.switch_config(broker_config(s), s), s, 9092)
    assert want["controller.quorum.voters"] == (
        "0@insights-kafka-0.insights-kafka.hanzo.svc.cluster.local:9095")
    assert "controller.quorum.bootstrap.servers" not in want
    assert want["allow.everyone.if.no.acl.found"] == "true"
    assert want["listener.security.protocol.map"].endswith(",LEGACY:PLAINTEXT")
    outs = switch["outputs"]
    secret_half = jaas_config(outs["adminPassword"]["value"], outs["principalPasswords"]["value"])
    meta = tmp_path / "data" / "data" / "meta.properties"

    # No old log directory on the volume (a wrong name, a new claim): stop, format nothing.
    proc = run_pod(switch, 0, tmp_path)
    assert proc.returncode == 65
    assert "meta.properties does not exist" in proc.stderr and "data-kafka-0" in proc.stderr
    assert not (tmp_path / "storage-args").exists() and not (tmp_path / "server.properties").exists()

    # Another cluster's directory: stop, and print neither id (the cluster id is a secret).
    meta.parent.mkdir(parents=True)
    meta.write_text("version=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\nnode.id=0\n")
    proc = run_pod(switch, 0, tmp_path)
    assert proc.returncode == 65 and "another cluster" in proc.stderr
    assert CLUSTER_ID not in proc.stderr + proc.stdout
    assert not (tmp_path / "server.properties").exists()

    # The old cluster's: the broker starts on it as it is.
    meta.write_text(f"#\nversion=1\ncluster.id={CLUSTER_ID}\nnode.id=0\n")
    proc = run_pod(switch, 0, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "storage-args").exists()
    got = parse_properties((tmp_path / "server.properties").read_text())
    assert got == {**want, **secret_half}


def test_after_finalize_the_stack_runs_broker_config_with_legacy_only(root, tmp_path):
    settled = render("dev", SETTLED, root=root)
    proc = run_pod(settled, 0, tmp_path)
    assert proc.returncode == 0, proc.stderr
    got = parse_properties((tmp_path / "server.properties").read_text())
    s = broker.broker_settings(top(SETTLED), 0)
    assert {k: v for k, v in got.items() if k in broker_config(s)} == (
        takeover.with_legacy(broker_config(s), s, 9092))
    assert got["allow.everyone.if.no.acl.found"] == "false"
    assert (tmp_path / "storage-args").read_text().startswith("format --ignore-formatted")
    # Closing the window: no LEGACY listener, port, Service port or policy is left.
    closed = render("dev", tuple((k, "0" if k == "legacyPlaintextPort" else v)
                                 for k, v in SETTLED), root=root)
    assert "9092" not in str(manifests(closed))


def test_a_legacy_port_without_a_window_in_the_registry_is_refused(tmp_path):
    with pytest.raises(RenderFailed, match="legacy_plaintext:. window"):
        render("dev", SETTLED, root=checkout(tmp_path, window=False))


@pytest.mark.parametrize(("sets", "message"), [
    ({"takeoverSwitch": True}, "clusterId is empty"),
    ({"takeoverSwitch": True, "clusterId": CLUSTER_ID, "brokers": 3}, "one-broker cluster"),
    ({"headlessServiceName": "kafka"}, "cannot be headless"),
    ({"statefulSetName": "Insights_Kafka"}, "not a Kubernetes name"),
    ({"legacyPlaintextPort": 9095}, "other than the broker's own"),
    ({"legacyPlaintextPort": 80}, "from 1024"),
    ({"brokerUid": -1}, "brokerUid"),
])
def test_bad_takeover_settings_are_refused_with_the_fix(sets, message):
    with pytest.raises(SettingsError, match=message):
        parse(sets)
