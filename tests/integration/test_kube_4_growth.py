"""The dev stack grown from one broker to three under acks=all load, by
docs/runbooks/scaling-1-to-3.md's steps on the real cluster, then `pulumi destroy` and
`pulumi up` again: the retained volumes carry every acknowledged event across.

Runs on the session's dev stack after test_kube_1_dev and _2_spark (it leaves it with three
brokers, which the fixture destroys at the end of the session).
"""

from __future__ import annotations

import json
import sys
import time

import pytest

from .conftest import wait_for
from .kube import admin_properties, brokers_ready, checkout_with, in_node, load, record, restarts

pytestmark = [pytest.mark.integration, pytest.mark.timeout(2700)]

BIN = "/opt/kafka/bin"


def kafka_tool(dev, tool: str, *args: str, container: str = "kafka") -> str:
    conf = admin_properties(dev)
    b = f"kafka.{dev.namespace}.svc.cluster.local:9093"
    return dev.kubectl("exec", "kafka-0", "-c", container, "--", f"{BIN}/{tool}",
                       "--bootstrap-server", b, "--command-config", conf, *args).stdout


def replicas(dev, topic: str) -> tuple[int, str]:
    """(replication factor, min.insync.replicas) of a topic, as the brokers report them."""
    described = kafka_tool(dev, "kafka-topics.sh", "--describe", "--topic", topic)
    rf = int(described.split("ReplicationFactor:")[1].split()[0])
    configs = kafka_tool(dev, "kafka-configs.sh", "--describe", "--all", "--entity-type", "topics",
                         "--entity-name", topic)
    isr = next(ln for ln in configs.splitlines() if "min.insync.replicas=" in ln)
    return rf, isr.split("min.insync.replicas=")[1].split()[0]


@pytest.fixture(scope="module")
def dev(kube_dev, tmp_path_factory):
    """Step 1 of the runbook: the registry manages replication (`profile: cluster`)."""
    root = checkout_with(tmp_path_factory.mktemp("growth"),
                         lambda doc: doc.__setitem__("replication", {"profile": "cluster"}))
    kube_dev.deployer.root = root
    kube_dev.up()
    return kube_dev


def test_one_broker_grows_to_three_in_place_and_loses_nothing(dev):
    # Step 1: min ISR 1 pinned on every topic, with the runbook's own loop.
    conf, b = admin_properties(dev), f"kafka.{dev.namespace}.svc.cluster.local:9093"
    dev.kubectl("exec", "kafka-0", "-c", "kafka", "--", "sh", "-c", f"""
      for t in $({BIN}/kafka-topics.sh --bootstrap-server {b} --command-config {conf} --list); do
        {BIN}/kafka-configs.sh --bootstrap-server {b} --command-config {conf} --alter \\
          --entity-type topics --entity-name $t --add-config min.insync.replicas=1
      done""")
    assert int(dev.outputs["initialControllers"]) == 1  # step 2: the record says one founder
    before = dev.pods()
    t = time.monotonic()
    with load(dev, "grow-1-to-3", min_isr=1) as result:
        dev.up(brokers=3, initialControllers=1)  # step 3
        took = time.monotonic() - t
        wait_for(lambda: brokers_ready(dev, 3), 900, "three brokers ready")
        time.sleep(5)
    after = dev.pods()
    record("brokers 1 -> 3", up_seconds=round(took),
           kafka_0_restarts=restarts({"kafka-0": before["kafka-0"]}, {"kafka-0": after["kafka-0"]}),
           **{k: result[k] for k in ("sent", "acked", "failed", "acked_lost", "unreported",
                                     "duplicated", "producer_errors")},
           error_samples=result["error_samples"][:3], failed_samples=result["failed_samples"][:3])
    assert set(after) == {"kafka-0", "kafka-1", "kafka-2"}
    assert result["acked"] > 0
    assert result["acked_lost"] == 0 and result["unreported"] == 0, result

    # Three voters, each with its own directory id (the join-quorum sidecars added two).
    quorum = kafka_tool(dev, "kafka-metadata-quorum.sh", "describe", "--replication")
    statuses = [ln.split()[-1] for ln in quorum.splitlines()[1:] if ln.split()]
    assert sorted(statuses) == ["Follower", "Follower", "Leader"], quorum
    # The reconciler ran again and raised the registry's topics and Kafka's own to RF 3,
    # min ISR 2 (the cluster profile at three brokers).
    for topic in ("llm_usage", "billing_events", "__consumer_offsets"):
        assert replicas(dev, topic) == (3, "2"), topic


def test_destroy_and_up_again_keep_every_acknowledged_event(dev):
    """`pulumi destroy` keeps the namespace and its volumes (retained); the next `up` formats
    nothing, keeps the cluster id (derived from the namespace) and hands out new passwords
    (the reconciler Job writes them): the events acknowledged before are all still there."""
    volumes = {p["metadata"]["name"]: p["spec"]["volumeName"]
               for p in dev.json("pvc")["items"] if p["metadata"]["name"].startswith("data-")}
    assert len(volumes) == 3
    t = time.monotonic()
    dev.deployer.destroy(dev.name, dev.env)
    wait_for(lambda: not dev.pods(), 300, "the brokers gone")
    destroyed = time.monotonic() - t
    t = time.monotonic()
    dev.up()
    wait_for(lambda: brokers_ready(dev, 3), 900, "three brokers ready after up")
    again = time.monotonic() - t
    assert {p["metadata"]["name"]: p["spec"]["volumeName"]
            for p in dev.json("pvc")["items"] if p["metadata"]["name"].startswith("data-")} == volumes
    out = in_node(dev.node, [sys.executable, "-m", "hanzo_stream.kube.load", "count", "--ledger",
                             str(dev.work / "ledger-grow-1-to-3.json")],
                  env=dev.client_env("billing-aggregator"), timeout=600)
    tally = json.loads(out.stdout)
    record("destroy and up", destroy_seconds=round(destroyed), up_seconds=round(again),
           acked=tally["acked"], acked_lost=tally["acked_lost"])
    assert tally["acked"] > 0 and tally["acked_lost"] == 0, tally
