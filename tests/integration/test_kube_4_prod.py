"""The prod stack (Pulumi.prod.yaml: environment prod and its policy, three brokers, the
roll gate) deployed with the real `pulumi up` in a namespace of its own beside the dev
stack, with only what this machine needs changed (deploy.py LOCAL["prod"]); then used as a
client would, and a broker pod deleted under acks=all load (`kubectl delete pod` goes
through the roll gate: the broker stops only when no partition would fall under min ISR).
"""

from __future__ import annotations

import re
import time

import pytest

from hanzo_stream.kube.deploy import Deployer

from .conftest import KEEP_NODE, wait_for
from .kube import Stack, acknowledged_again, brokers_ready, load, record, replication, restarts

pytestmark = [pytest.mark.integration, pytest.mark.timeout(2400)]

NAMESPACE = "hanzo-prod"


@pytest.fixture(scope="module")
def prod(kube_node, tmp_path_factory):
    work = tmp_path_factory.mktemp("local-prod")
    stack = Stack(Deployer(kube_node, home=work / "pulumi"), "local-prod", "prod",
                  {"namespace": NAMESPACE, "clientNamespaces": [NAMESPACE], "spark": False},
                  work=work)
    t = time.monotonic()
    stack.up()
    record("prod stack up", seconds=round(time.monotonic() - t))
    yield stack
    if KEEP_NODE:
        stack.deployer.destroy(stack.name, stack.env)


def test_prod_up_runs_three_brokers_with_the_prod_replication(prod):
    assert brokers_ready(prod, 3)
    assert replication(prod, "llm_usage") == {"brokers": [0, 1, 2],
                                              "llm_usage": {"rf": [3], "min_isr": "2"}}


def test_preview_right_after_up_plans_no_changes(prod):
    plan = prod.preview()
    assert plan.changes == 0, plan.steps


def test_a_deleted_broker_pod_waits_for_the_gate_and_loses_nothing(prod):
    before = prod.pods()["kafka-1"]["metadata"]["uid"]
    t = time.monotonic()
    with load(prod, "prod-delete-kafka-1", min_isr=2) as result:
        prod.kubectl("delete", "pod", "kafka-1", "--wait=false")
        wait_for(lambda: prod.pods().get("kafka-1", {}).get("metadata", {}).get("uid") not in
                 (None, before) and brokers_ready(prod, 3), 900, "kafka-1 back and in sync")
        acknowledged_again(result, "kafka-1 came back")
    record("prod: kubectl delete pod kafka-1", seconds=round(time.monotonic() - t),
           **{k: result[k] for k in ("acked", "acked_lost", "failed", "producer_errors",
                                     "under_min_isr_longest_s")})
    assert result["acked"] > 0 and result["acked_lost"] == 0 and result["unreported"] == 0, result
    assert result["under_min_isr_longest_s"] == 0, result


def test_on_call_restarts_every_broker_the_active_controller_last(prod):
    """`kubectl rollout restart` restarts nothing on the OnDelete StatefulSet; on-call's
    rolling restart is a Job from the suspended kafka-restart CronJob: the roller with
    --restart-all (hanzo_stream/pods/roller.py), each broker once, through the roll gate, the
    active controller last."""
    before = prod.pods()
    name = "kafka-restart-by-hand"

    def finished() -> bool | None:
        st = prod.json("job", name)["status"]
        assert not st.get("failed"), prod.kubectl("logs", f"job/{name}").stdout[-3000:]
        return st.get("succeeded") == 1 or None
    t = time.monotonic()
    with load(prod, "prod-restart-all", min_isr=2) as result:
        prod.kubectl("create", "job", "--from=cronjob/kafka-restart", name)
        wait_for(finished, 1500, "the restart Job done")
        acknowledged_again(result, "the last broker came back")
    log = prod.kubectl("logs", f"job/{name}").stdout
    order = re.findall(r"restarting (kafka-\d+)", log)
    leader = re.findall(r"the active controller is node (\d+)", log)
    record("prod: on-call restart of every broker", seconds=round(time.monotonic() - t),
           order=order, leader_before=leader[:1],
           broker_restarts=restarts(before, prod.pods()),
           **{k: result[k] for k in ("acked", "acked_lost", "failed", "producer_errors",
                                     "under_min_isr_longest_s")})
    assert sorted(order) == ["kafka-0", "kafka-1", "kafka-2"], log
    assert order[-1] == f"kafka-{leader[0]}", log
    assert restarts(before, prod.pods()) == 3 and brokers_ready(prod, 3)
    assert result["acked"] > 0 and result["acked_lost"] == 0 and result["unreported"] == 0, result
    assert result["under_min_isr_longest_s"] == 0, result
