"""Taking over the standard's running insights-kafka on Kubernetes, as the runbook in
docs/takeover.md ("On Kubernetes") says, step by step, with a producer writing throughout.

The old cluster is what the standard describes: the StatefulSet `insights-kafka` (one Kafka
3.7 broker in KRaft combined mode, node 0, Bitnami's layout, uid 1001 and KAFKA_CFG_*
variables; image kafka-3.7 of hanzo_stream/kube/images.py), its headless Service
`insights-kafka`, PLAINTEXT on 9092, the claim `data-insights-kafka-0`, topics from the
standard's kafka-topics.sh lines, events of every type in every codec, groups at known
offsets. Its own namespace here (`insights`), as the dev stack has `hanzo`.

After `pulumi up` with the takeover settings: every record at its offset byte for byte, every
group where it was, every acknowledged write of the switch present, the platform's clients on
SASL_SSL, the old address still answering; after `kafka-features upgrade` and the `pulumi up`
that ends the switch, the same again on the platform's own configuration.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hanzo_stream.artifacts import jvm
from hanzo_stream.kube import images, netns
from hanzo_stream.kube.deploy import Deployer
from hanzo_stream.pods import takeover

from .conftest import KEEP_NODE, wait_for
from .kube import ROOT, Stack, admin_properties, brokers_ready, checkout_with, in_node, record
from .legacy_kafka import topic_lines

pytestmark = [pytest.mark.integration, pytest.mark.timeout(2400)]

NS = "insights"
NAME = "insights-kafka"  # StatefulSet and headless Service, as the standard names them
POD = f"{NAME}-0"
OLD_ADDRESS = f"{POD}.{NAME}.{NS}.svc.cluster.local:9092"  # what the old clients dial
CLUSTER_ID = "c3RhbmRhcmQtaW5zaWdodA"  # the old cluster's (any Kafka Uuid)
HOME = images.LEGACY_HOME


def old_cluster(image: str) -> list[dict]:
    """insights-kafka as the Bitnami chart runs it (the parts the takeover meets)."""
    sel = {"app.kubernetes.io/name": "kafka", "app.kubernetes.io/instance": NAME}
    cfg = {
        "NODE_ID": "0", "PROCESS_ROLES": "controller,broker",
        "CONTROLLER_QUORUM_VOTERS": f"0@{POD}.{NAME}.{NS}.svc.cluster.local:9094",
        "LISTENERS": "PLAINTEXT://:9092,CONTROLLER://:9094",
        "ADVERTISED_LISTENERS": f"PLAINTEXT://{OLD_ADDRESS}",
        "LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "CONTROLLER_LISTENER_NAMES": "CONTROLLER", "INTER_BROKER_LISTENER_NAME": "PLAINTEXT",
        "LOG_DIRS": "/bitnami/kafka/data", "NUM_PARTITIONS": "1",
        "OFFSETS_TOPIC_REPLICATION_FACTOR": "1", "TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "TRANSACTION_STATE_LOG_MIN_ISR": "1", "GROUP_INITIAL_REBALANCE_DELAY_MS": "0"}
    env = [{"name": f"KAFKA_CFG_{k}", "value": v} for k, v in cfg.items()]
    env += [{"name": "KAFKA_KRAFT_CLUSTER_ID", "value": CLUSTER_ID},
            {"name": "KAFKA_HEAP_OPTS", "value": "-Xms256m -Xmx512m"},
            {"name": "KAFKA_OPTS", "value": " ".join(jvm.jit_flags())}]
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": NAME, "namespace": NS, "labels": sel},
         "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": sel,
                  "ports": [{"name": "tcp-client", "port": 9092},
                            {"name": "tcp-controller", "port": 9094}]}},
        {"apiVersion": "apps/v1", "kind": "StatefulSet",
         "metadata": {"name": NAME, "namespace": NS, "labels": sel},
         "spec": {
             "serviceName": NAME, "replicas": 1, "selector": {"matchLabels": sel},
             "template": {"metadata": {"labels": sel}, "spec": {
                 "securityContext": {"runAsUser": 1001, "runAsGroup": 1001, "fsGroup": 1001},
                 "terminationGracePeriodSeconds": 60,
                 "containers": [{
                     "name": "kafka", "image": image, "env": env,
                     "ports": [{"name": "client", "containerPort": 9092},
                               {"name": "controller", "containerPort": 9094}],
                     "readinessProbe": {"tcpSocket": {"port": 9092}, "periodSeconds": 5},
                     "resources": {"requests": {"cpu": "100m", "memory": "512Mi"},
                                   "limits": {"memory": "1Gi"}},
                     "volumeMounts": [{"name": "data", "mountPath": "/bitnami/kafka"}]}]}},
             "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                 "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}}}],
         }},
    ]


def data(node, *args: str, env: dict | None = None, timeout: float = 600) -> str:
    """takeover_data's command line on the node's network (where the cluster's names resolve)."""
    return in_node(node, [sys.executable, "-m", "tests.integration.takeover_data", *args],
                   env=env, timeout=timeout).stdout


def records(path: Path) -> dict:
    return json.loads(path.read_text())


def resumed(before: dict, after: dict, running: set[str]) -> None:
    """Every group where it was; a group the stack runs (llm-metrics) resumed from there: its
    offsets only moved on."""
    assert after.keys() == before.keys()
    for g, offsets in before.items():
        if g in running:
            assert all(after[g].get(p, -1) >= o for p, o in offsets.items()), (g, offsets, after[g])
        else:
            assert after[g] == offsets, g


@pytest.fixture(scope="module")
def node(kube_node):
    images.import_images(kube_node.ctr()[:3], ["kafka-3.7"])
    yield kube_node
    if KEEP_NODE:
        kube_node.kubectl("delete", "namespace", NS, "--wait=false", check=False)


def test_insights_kafka_is_taken_over_on_kubernetes(node, tmp_path):
    kubectl = lambda *a, **kw: node.kubectl("-n", NS, *a, **kw)  # noqa: E731
    ref = images.refs()["kafka-3.7"]
    node.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                       "items": old_cluster(ref)}))
    wait_for(lambda: kubectl("get", "pod", POD, "-o", "jsonpath={.status.containerStatuses[0].ready}",
                             check=False).stdout == "true", 300, "insights-kafka-0 (Kafka 3.7) ready")
    # The standard's topics, by its own lines, in the old pod.
    script = "; ".join(f"{HOME}/bin/kafka-topics.sh " + " ".join(line)
                       for line in topic_lines("localhost:9092"))
    kubectl("exec", POD, "--", "sh", "-ec", script, timeout=600)
    groups = json.loads(data(node, "--bootstrap", OLD_ADDRESS, "seed"))
    before = tmp_path / "before.json"
    data(node, "--bootstrap", OLD_ADDRESS, "snapshot", "--out", str(before))
    assert records(before)["groups"] == groups

    # The runbook, step 1: the old cluster's id, from its log directory.
    meta = kubectl("exec", POD, "--", "cat", "/bitnami/kafka/data/meta.properties").stdout
    cluster_id = dict(x.split("=", 1) for x in meta.splitlines() if "=" in x)["cluster.id"]
    assert cluster_id == CLUSTER_ID

    # Producers on the old address keep writing through all of it (acks=all, idempotent).
    ledger, stop = tmp_path / "live.json", tmp_path / "live.stop"
    live_log = open(tmp_path / "live.log", "w")  # noqa: SIM115 (closed after the producer)
    live = subprocess.Popen([*netns.exec_in(node.addr), sys.executable, "-m",
                             "tests.integration.takeover_data", "--bootstrap", OLD_ADDRESS, "live",
                             "--ledger", str(ledger), "--stop-file", str(stop), "--most", "200000"],
                            cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=live_log)
    try:
        time.sleep(5)
        assert live.poll() is None, (tmp_path / "live.log").read_text()[-3000:]
        # Step 2: the stack, named as the old cluster is, with the transition window in topics.yaml.
        root = checkout_with(tmp_path, lambda doc: doc.update(legacy_plaintext={
            "stands_in_for": ["llm-gateway"],
            "until": (time.strftime("%Y-%m-%d", time.gmtime(time.time() + 30 * 86400)))}))
        stack = Stack(Deployer(node, home=tmp_path / "pulumi", root=root), "local-takeover", "dev", {
            "namespace": NS, "createNamespace": False, "clientNamespaces": [NS], "spark": False,
            "deadLetterMonitor": False, "statefulSetName": NAME, "headlessServiceName": NAME,
            "clientServiceName": "kafka", "clusterId": cluster_id, "takeoverSwitch": True,
            "legacyPlaintextPort": 9092, "brokerUid": 1001}, work=tmp_path)
        # Step 3 (a user's `pulumi preview` review) changes nothing: the up below plans the same.
        # Step 4, the switch: the old StatefulSet and Service go (the claim stays), `pulumi up`.
        t0 = time.monotonic()
        # Foreground: the old broker has stopped (a clean shutdown) before anything else
        # could mount its volume; two brokers on one log directory would corrupt it.
        kubectl("delete", "statefulset", NAME, "--cascade=foreground", "--wait=true", timeout=300)
        kubectl("wait", "--for=delete", f"pod/{POD}", "--timeout=120s", check=False, timeout=180)
        kubectl("delete", "service", NAME)
        stopped = time.monotonic() - t0
        stack.up()
        wait_for(lambda: stack.json("statefulset", NAME)["status"].get("readyReplicas") == 1,
                 600, "the platform's broker ready on the old volume")
        switch_s = time.monotonic() - t0
        assert kubectl("get", "pvc", "-o", "name").stdout.split() == [f"persistentvolumeclaim/data-{POD}"]
        # Every record and group as it was; the registry applied (the reconciler Job).
        after = tmp_path / "after.json"
        data(node, "snapshot", "--out", str(after), env=stack.client_env("admin"))
        old, new = records(before), records(after)
        running = set(stack.outputs["consumerJobs"])  # the stack's own consumers resume and commit
        resumed(old["groups"], new["groups"], running)
        assert all(new["records"].get(k) == v for k, v in old["records"].items())
        # The old address answers anonymous clients as the window allows, and no more.
        assert json.loads(data(node, "--bootstrap", OLD_ADDRESS, "write", "--topic", "llm_usage")) == {
            "error": None}
        refused = json.loads(data(node, "--bootstrap", OLD_ADDRESS, "write", "--topic", "audit_log"))
        assert refused["error"] is not None

        # Step 5: finalize, in the broker pod with the admin's login (the runbook's commands).
        conf = admin_properties(stack, POD)
        features = stack.kubectl("exec", POD, "-c", "kafka", "--", "/opt/kafka/bin/kafka-features.sh",
                                 "--bootstrap-server", f"{POD}.{NAME}.{NS}.svc.cluster.local:9093",
                                 "--command-config", conf, "upgrade", "--release-version",
                                 takeover.release(), timeout=300).stdout
        described = stack.kubectl("exec", POD, "-c", "kafka", "--", "/opt/kafka/bin/kafka-features.sh",
                                  "--bootstrap-server", f"{POD}.{NAME}.{NS}.svc.cluster.local:9093",
                                  "--command-config", conf, "describe", timeout=300).stdout
        level = {x.split()[1]: x.split("FinalizedVersionLevel:")[1].split()[0]
                 for x in described.splitlines() if x.startswith("Feature:")}
        assert level["kraft.version"] == "1", features + described
        # Step 6: the switch ends: the platform's own configuration (dynamic quorum, deny by
        # default), LEGACY kept while the window is open.
        t1 = time.monotonic()
        stack.up(takeoverSwitch=False)
        wait_for(lambda: brokers_ready(stack, 1, NAME), 600, "the roll")
        settle_s = time.monotonic() - t1
        time.sleep(5)  # the producer acknowledged again after the roll
    finally:
        stop.touch()
        live.wait(timeout=300)
        live_log.close()
    got = json.loads(ledger.read_text())
    final = tmp_path / "final.json"
    data(node, "snapshot", "--out", str(final), env=stack.client_env("admin"))
    last = records(final)
    resumed(old["groups"], last["groups"], running)
    assert all(last["records"].get(k) == v for k, v in old["records"].items())
    at = {k: r[1] for k, r in last["records"].items() if k.startswith("llm_usage/")}
    lost = [(p, o) for p, o, v in got["acked"] if at.get(f"llm_usage/{p}/{o}") != v]
    times = sorted(got["ack_times"])  # CLOCK_MONOTONIC: the same clock in every process here

    def longest_gap(start: float, end: float) -> float:
        inside = [start, *(t for t in times if start <= t <= end)]
        after = next((t for t in times if t > end), end)
        return max(b - a for a, b in zip(inside, [*inside[1:], after], strict=True))
    facts = {"records": len(old["records"]), "groups": len(old["groups"]),
             "acked_during": len(got["acked"]), "acked_lost": len(lost), "errors": len(got["errors"]),
             "unacked": got["unacked"], "old_stopped_s": round(stopped, 1),
             "switch_s": round(switch_s), "settle_s": round(settle_s),
             "switch_longest_without_ack_s": round(longest_gap(t0, t0 + switch_s), 1),
             "settle_longest_without_ack_s": round(longest_gap(t1, t1 + settle_s), 1)}
    record("takeover of insights-kafka (Kafka 3.7) on Kubernetes", **facts)
    assert got["errors"] == [] and got["unacked"] == 0 and not lost, facts
    assert times[-1] > t1 + settle_s, "the producer stopped before the roll ended"
