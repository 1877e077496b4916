"""The dev stack deployed with the real `pulumi up` to the real local Kubernetes, then used
as users use it: clients through the Service over SASL_SSL with the stack's CA, a denied
principal denied, the runbooks' `kubectl exec` commands, the JMX metrics scraped, and a
preview right after `up` that plans nothing."""

from __future__ import annotations

import json
import sys
import textwrap
import urllib.parse
import urllib.request

import pytest

from hanzo_stream.kube import netns
from hanzo_stream.kube.node import NODE_LABELS
from tests import docs_blocks

from .conftest import wait_for
from .kube import admin_properties, in_node

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def dev(kube_dev):
    return kube_dev


PRODUCE_CONSUME = textwrap.dedent("""
    import json, os, sys, time
    from datetime import UTC, datetime, timedelta
    from confluent_kafka import Consumer, TopicPartition
    from hanzo_stream.client.envelope import iso_ms
    from hanzo_stream.client.producer import EventProducer
    from hanzo_stream.core.connection import Connection
    from hanzo_stream.local import failover

    conn = Connection.from_env()
    ledger = failover.Ledger()
    producer = EventProducer.connect(conn, stage="probe")
    for i in range(20):
        e = failover.usage_event(ledger, f"team_probe_{i % 4}", i)
        e["timestamp"] = iso_ms(datetime.now(UTC) - timedelta(days=3))  # before kube_2's hours
        producer.send(e, on_delivery=ledger.report(e["id"]))
        ledger.sent[e["id"]] = 0
    producer.flush(60)
    reader = conn.as_principal("billing-aggregator", os.environ["READER_PASSWORD"])
    found = failover.ids_in_topic(reader, ledger)
    print(json.dumps({"acked": len(ledger.acked), "failed": ledger.failed,
                      "read_back": sum(1 for i in ledger.acked if found[i])}))
""")


def test_pulumi_up_started_the_broker_and_the_reconciler_applied_the_registry(dev, registry):
    sts = dev.json("statefulset", "kafka")
    assert sts["status"].get("readyReplicas") == 1
    job = dev.json("job", dev.outputs["reconcilerJob"])
    assert job["status"].get("succeeded") == 1, job["status"]
    logs = dev.kubectl("logs", f"job/{dev.outputs['reconcilerJob']}").stdout
    assert "Applied" in logs, logs
    out = in_node(dev.node, [sys.executable, "-m", "hanzo_stream.cli", "plan"],
                  env=dev.client_env("admin"), check=False)
    assert out.returncode == 0, out.stdout + out.stderr  # the live cluster is topics.yaml


def test_preview_right_after_up_plans_no_changes(dev):
    plan = dev.preview()
    assert plan.changes == 0, plan.steps
    # The state backend keeps no `.attrs` sidecars: fileblob rewrites them in place, and one
    # read half-written by the program's StackReference failed a first `up` (deploy.py).
    backend = dev.deployer.home / "backend"
    assert list(backend.rglob("*.json")) and not list(backend.rglob("*.attrs"))


def test_a_storage_class_the_cluster_lacks_or_no_default_is_refused_at_preview(dev):
    """infra/preflight.py with the real engine and API server. Before it, both previews passed
    and `up` left the claims Pending until the rollout timed out (EKS 1.30+ has no default
    class). The refusals list the node's real classes, so the program read them. (A preview
    writes its settings into the stack's config: the last one leaves storageClass as it was.)"""
    default = "storageclass.kubernetes.io/is-default-class"
    before = {k: p["metadata"]["uid"] for k, p in dev.pods().items()}
    try:
        with pytest.raises(Exception, match=r"storageClass is 'fast-ssd', which the cluster of "
                                            r"kubeconfig context '[^']+' does not have") as e:
            dev.preview(storageClass="fast-ssd")
        assert "its StorageClasses: hanzo-local (default)." in str(e.value)
        dev.node.kubectl("annotate", "storageclass", "hanzo-local", f"{default}-")
        try:
            with pytest.raises(Exception, match=r"storageClass is unset and the cluster of kubeconfig "
                                                r"context '[^']+' has no default StorageClass") as e:
                dev.preview(storageClass="")
            assert "Its StorageClasses: hanzo-local." in str(e.value)
        finally:
            dev.node.kubectl("annotate", "--overwrite", "storageclass", "hanzo-local",
                             f"{default}=true")
    finally:
        dev.preview(storageClass="")  # the default class again: passes, and is the stack's again
    assert {k: p["metadata"]["uid"] for k, p in dev.pods().items()} == before


def test_clients_produce_and_consume_through_the_service_with_the_stacks_ca(dev):
    env = dev.client_env("llm-gateway") | {"READER_PASSWORD": dev.password("billing-aggregator")}
    out = in_node(dev.node, [sys.executable, "-c", PRODUCE_CONSUME], env=env)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"acked": 20, "failed": {}, "read_back": 20}


def test_kcat_reads_through_the_service_and_is_refused_what_is_not_granted(dev):
    # PLAIN, as docs/runbooks/dead-letters.md does: Debian 12's kcat (librdkafka 2.0.2) repeats
    # the SCRAM nonce, which Kafka 4 refuses; every principal has a PLAIN login too.
    conf = dev.work / "kcat.conf"
    conf.write_text("security.protocol=SASL_SSL\nsasl.mechanisms=PLAIN\n"
                    "sasl.username=billing-aggregator\n"
                    f"sasl.password={dev.password('billing-aggregator')}\n"
                    f"ssl.ca.location={dev.work / 'ca.crt'}\n")
    conf.chmod(0o600)
    bootstrap = dev.outputs["bootstrap"]
    meta = in_node(dev.node, ["kcat", "-F", str(conf), "-b", bootstrap, "-L", "-J"])
    topics = {t["topic"] for t in json.loads(meta.stdout)["topics"]}
    assert {"llm_usage", "billing_events", "dead_letter"} <= topics
    read = in_node(dev.node, ["kcat", "-F", str(conf), "-b", bootstrap, "-C", "-t", "llm_usage",
                              "-o", "beginning", "-e", "-q", "-f", "%s\\n"])
    assert '"type":"llm.usage.completed"' in read.stdout.replace(" ", "")
    denied = in_node(dev.node, ["kcat", "-F", str(conf), "-b", bootstrap, "-P", "-t", "audit_log"],
                     check=False, input="{}")
    assert denied.returncode != 0 and "authorization" in denied.stderr.lower()


def test_a_principal_is_denied_what_the_registry_does_not_grant(dev):
    script = textwrap.dedent("""
        import json
        from confluent_kafka import Producer
        from hanzo_stream.core.connection import Connection
        errors = []
        p = Producer(Connection.from_env().confluent() | {"acks": "all"})
        p.produce("audit_log", b"{}", on_delivery=lambda err, msg: errors.append(err and err.name()))
        p.flush(30)
        print(json.dumps(errors))
    """)
    out = in_node(dev.node, [sys.executable, "-c", script], env=dev.client_env("llm-gateway"))
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["TOPIC_AUTHORIZATION_FAILED"]


def test_the_broker_takes_its_nodes_zone_as_its_rack(dev):
    """The API server copies the node's zone label onto the pod at binding; the broker reads
    it through the downward API and registers with it, as DescribeCluster shows clients."""
    zone = NODE_LABELS["topology.kubernetes.io/zone"]
    pod = dev.json("pod", "kafka-0")
    assert pod["metadata"]["labels"].get("topology.kubernetes.io/zone") == zone
    script = textwrap.dedent("""
        import json
        from confluent_kafka.admin import AdminClient
        from hanzo_stream.core.connection import Connection
        admin = AdminClient(Connection.from_env().confluent())  # held: its futures die with it
        print(json.dumps({n.id: n.rack for n in admin.describe_cluster().result(60).nodes}))
    """)
    out = in_node(dev.node, [sys.executable, "-c", script], env=dev.client_env("admin"))
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"0": zone}


def test_the_runbooks_kubectl_exec_commands_work_in_the_broker_pod(dev):
    """docs/runbooks/scaling-1-to-3.md: an admin client config from the Secret into the pod's
    run directory, then the Kafka tools through the client Service; disaster-recovery-k8s.md's
    throttle and unthrottle blocks as written."""
    conf = admin_properties(dev)
    b = f"kafka.{dev.namespace}.svc.cluster.local:9093"
    listed = dev.kubectl("exec", "kafka-0", "-c", "kafka", "--", "/opt/kafka/bin/kafka-topics.sh",
                         "--bootstrap-server", b, "--command-config", conf,
                         "--list")
    assert {"llm_usage", "audit_log", "dead_letter"} <= set(listed.stdout.split())
    quorum = dev.kubectl("exec", "kafka-0", "-c", "kafka", "--",
                         "/opt/kafka/bin/kafka-metadata-quorum.sh", "--bootstrap-server", b,
                         "--command-config", conf, "describe", "--status")
    assert "LeaderId:" in quorum.stdout
    # disaster-recovery-k8s.md's throttle, pasted as on-call would, with that same config file:
    # the brokers' rates and every topic's throttled replicas (a rate alone throttles nothing)
    def configs(entity: str, *name: str) -> str:
        return dev.kubectl("exec", "kafka-0", "-c", "kafka", "--", "/opt/kafka/bin/kafka-configs.sh",
                           "--bootstrap-server", b, "--command-config", conf, "--entity-type",
                           entity, *(("--entity-name", *name) if name else ("--entity-default",)),
                           "--describe").stdout

    page = "docs/runbooks/disaster-recovery-k8s.md"
    docs_blocks.run(page, ["throttle"], dev.shell_env())
    rates = configs("brokers")
    assert "leader.replication.throttled.rate=50000000" in rates, rates
    assert "follower.replication.throttled.rate=50000000" in rates, rates
    for topic in ("llm_usage", "__consumer_offsets"):  # a registry topic and an internal one
        replicas = configs("topics", topic)
        assert "leader.replication.throttled.replicas=*" in replicas, replicas
        assert "follower.replication.throttled.replicas=*" in replicas, replicas
    docs_blocks.run(page, ["unthrottle"], dev.shell_env())
    assert "throttled" not in configs("brokers") + configs("topics", "llm_usage")


def test_the_brokers_jmx_metrics_are_scraped_by_prometheus(dev, tmp_path):
    """A real Prometheus on the node's network scrapes the JMX exporter's port of every broker
    pod. Debian's Prometheus is built without Kubernetes discovery, so the targets are what
    the API server lists (pod IP and the `metrics` port), handed over through file_sd."""
    import subprocess

    targets = [{"targets": [f"{p['status']['podIP']}:{port['containerPort']}"],
                "labels": {"pod": name}}
               for name, p in dev.pods().items()
               for c in p["spec"]["containers"] for port in c.get("ports", [])
               if port.get("name") == "metrics"]
    assert [t["labels"]["pod"] for t in targets] == ["kafka-0"]
    (tmp_path / "targets.json").write_text(json.dumps(targets))
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({
        "global": {"scrape_interval": "2s"},
        "scrape_configs": [{"job_name": "kafka-jmx", "file_sd_configs": [
            {"files": [str(tmp_path / "targets.json")]}]}]}))
    port = 19090
    log = tmp_path / "prometheus.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([*netns.run_in(dev.node.addr), "prometheus", f"--config.file={config}",
                                 f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=out, stderr=subprocess.STDOUT)

    def query(q: str) -> list:
        assert proc.poll() is None, log.read_text()[-2000:]
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
        with netns.entered(dev.node.addr), urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read())["data"]["result"]
    try:
        up = wait_for(lambda: query('up{job="kafka-jmx"} == 1'), 90, "the broker's scrape target up")
        assert {s["metric"]["pod"] for s in up} == {"kafka-0"}
        assert wait_for(lambda: query("kafka_controller_kafkacontroller_activecontrollercount == 1"),
                        60, "the broker's controller metric")
    finally:
        proc.terminate()
        proc.wait(30)
