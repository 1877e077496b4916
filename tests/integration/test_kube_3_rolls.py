"""Changes as users make them, on a prod-shaped stack (3 brokers, RF 3, min ISR 2), each with
acks=all producers running and every acknowledged event counted afterwards: a broker config
override, a new principal, the image tag, a certificate renewal, `storageSize`.

For each change the record (tests/integration/kube.py `record`, printed and written to the
session's report file) says what Pulumi planned, how many broker restarts it cost, the
longest time a partition was under min ISR, acknowledged events lost (must be 0) and the
errors producers saw.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from hanzo_stream.kube.deploy import Deployer

from .conftest import wait_for
from .kube import ROOT, Stack, brokers_ready, checkout_with, load, record, restarts

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
    print(f"\npulumi up local-prod (3 brokers): {time.monotonic() - t:.0f}s")
    yield stack
    stack.deployer.destroy(stack.name, stack.env)


def change(stack: Stack, what: str, replace: list[str] | None = None, **settings) -> dict:
    """Plan, then apply `settings` under load; record and return what it cost."""
    plan = stack.preview(**settings) if not replace else None
    before = stack.pods()
    t = time.monotonic()
    with load(stack, what.replace(" ", "-"), min_isr=2) as result:
        stack.up(replace=replace, **settings)
        took = time.monotonic() - t
        wait_for(lambda: brokers_ready(stack, 3), 600, "every broker ready on the new revision")
        time.sleep(5)  # producers acknowledged after the last broker came back
    facts = {
        "planned": ({s["name"]: s["op"] for s in plan.steps} if plan
                    else {r: "replace" for r in replace or ()}),
        "statefulset": (plan.ops("StatefulSet").get("statefulset-kafka", "same") if plan else "n/a"),
        "up_seconds": round(took), "broker_restarts": restarts(before, stack.pods()),
        **{k: result[k] for k in ("sent", "acked", "failed", "acked_lost", "unreported",
                                  "duplicated", "producer_errors", "under_min_isr_longest_s")},
        "error_samples": result["error_samples"][:3], "failed_samples": result["failed_samples"][:3],
    }
    record(what, **facts)
    assert result["acked"] > 0
    assert result["acked_lost"] == 0 and result["unreported"] == 0, facts
    assert facts["statefulset"] != "replace", facts
    return facts


def test_a_broker_config_override(prod):
    overrides = {"num.network.threads": "6", "num.io.threads": "16",
                 "log.retention.check.interval.ms": "240000"}
    change(prod, "broker config override", brokerConfigOverrides=overrides)
    out = prod.kubectl("exec", "kafka-0", "-c", "kafka", "--", "grep", "log.retention.check",
                       "/opt/hanzo/run/server.properties").stdout
    assert "240000" in out


def test_a_new_principal(prod, tmp_path):
    root = checkout_with(tmp_path, lambda doc: doc["principals"].append(
        {"name": "reporting", "description": "Reporting reads billing."}))
    prod.deployer.root = root
    try:
        change(prod, "new principal")
    finally:
        prod.deployer.root = ROOT
    assert "reporting" in prod.outputs["principalPasswords"]
    prod.kubectl("get", "secret", "kafka-user-reporting")


def test_the_image_tag(prod, kube_node):
    old = prod.outputs["image"]
    new = old + "-r2"
    subprocess.run([*kube_node.ctr(), "images", "tag", "--force", old, new], check=True,
                   capture_output=True)
    change(prod, "image tag", image=new)
    images = {c["image"] for p in prod.pods().values() for c in p["spec"]["containers"]}
    assert images == {new}


def test_a_certificate_renewal(prod):
    before = prod.outputs["caCertPem"]
    cert = prod.json("secret", "kafka-tls")["data"]["tls.crt"]
    change(prod, "certificate renewal", replace=["kafka-broker-cert"])
    assert prod.json("secret", "kafka-tls")["data"]["tls.crt"] != cert
    assert prod.outputs["caCertPem"] == before  # clients keep trusting the same CA


def test_a_larger_storage_size(prod):
    facts = change(prod, "storageSize", storageSize="3Gi")
    for i in range(3):
        pvc = prod.json("pvc", f"data-kafka-{i}")
        assert pvc["spec"]["resources"]["requests"]["storage"] == "3Gi"
        wait_for(lambda i=i: prod.json("pvc", f"data-kafka-{i}")["status"]["capacity"]["storage"]
                 == "3Gi", 60, f"data-kafka-{i} resized")
    assert facts["broker_restarts"] == 0
