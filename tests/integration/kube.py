"""What the Kubernetes tests share: the node, the stacks, clients on the node's network,
load while a change rolls out, and the record of what each change cost.

One node per session (node.py). The stacks are deployed with the real Pulumi engine
(deploy.py); clients run as users' pods would, inside the node's network namespace where
the cluster's DNS names resolve, with the CA and passwords from the stack's outputs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hanzo_stream.kube import netns
from hanzo_stream.kube.deploy import Deployer, Plan
from hanzo_stream.kube.load import acked as load_acked
from hanzo_stream.kube.node import Node

from .conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]
REPORT = Path(os.environ.get("HANZO_STREAM_KUBE_REPORT", ROOT / ".hanzo-stream" / "kube-report.json"))


@dataclass
class Stack:
    """One deployed local stack and how to reach it."""

    deployer: Deployer
    name: str
    env: str
    settings: dict[str, Any]
    outputs: dict[str, Any] = field(default_factory=dict)
    work: Path = Path("/tmp")
    last_plan: Plan | None = None

    @property
    def node(self) -> Node:
        return self.deployer.node

    @property
    def namespace(self) -> str:
        return self.outputs["namespace"]

    def up(self, replace: list[str] | None = None, **changes: Any) -> Any:
        """`pulumi up`; what it did, step by step, is left in last_plan."""
        self.settings |= changes
        result, self.last_plan = self.deployer.up(self.name, self.env, self.settings,
                                                  on_output=_log, replace=replace)
        self.refresh_outputs(result.outputs)
        return result

    def preview(self, replace: list[str] | None = None, **changes: Any) -> Plan:
        return self.deployer.preview(self.name, self.env, self.settings | changes, on_output=_log,
                                     replace=replace)

    def refresh_outputs(self, outputs: dict) -> None:
        self.outputs = {k: v.value for k, v in outputs.items()}
        (self.work / "ca.crt").write_text(self.outputs["caCertPem"])

    def password(self, principal: str) -> str:
        if principal == "admin":
            return self.outputs["adminPassword"]
        return self.outputs["principalPasswords"][principal]

    def client_env(self, principal: str, mechanism: str | None = None) -> dict[str, str]:
        """HANZO_STREAM_* for `principal` through the client Service, as a pod would have."""
        mech = mechanism or ("PLAIN" if principal == "admin" else "SCRAM-SHA-512")
        return {**os.environ, "HANZO_STREAM_BOOTSTRAP": self.outputs["bootstrap"],
                "HANZO_STREAM_SECURITY_PROTOCOL": "SASL_SSL", "HANZO_STREAM_SASL_MECHANISM": mech,
                "HANZO_STREAM_SASL_USERNAME": principal,
                "HANZO_STREAM_SASL_PASSWORD": self.password(principal),
                "HANZO_STREAM_CA_FILE": str(self.work / "ca.crt")}

    def kubectl(self, *args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
        return self.node.kubectl("-n", self.namespace, *args, check=check, **kw)

    def shell_env(self) -> dict[str, str]:
        """A reader's shell after `eval "$(hanzo-stream local kube env)"`: kubectl on PATH,
        pointed at this node (the runbooks' blocks run in it, tests/docs_blocks.py)."""
        kubectl_dir = str(Path(self.node.binary("kubectl")).parent)
        return {**os.environ, "KUBECONFIG": str(self.node.kubeconfig),
                "PATH": f"{kubectl_dir}:{os.environ['PATH']}"}

    def json(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def pods(self, selector: str = "app.kubernetes.io/name=kafka") -> dict[str, dict]:
        return {p["metadata"]["name"]: p for p in self.json("pods", "-l", selector)["items"]}


def _log(line: str) -> None:
    sys.stderr.write(line)


def in_node(node: Node, argv: list[str], env: dict[str, str] | None = None, timeout: float = 300,
            check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    """Run argv on the node's network (cluster DNS), from the checkout; a failure shows its output."""
    out = subprocess.run([*netns.exec_in(node.addr), *argv], cwd=ROOT, env=env, timeout=timeout,
                         capture_output=True, text=True, input=input)
    if check and out.returncode != 0:
        raise AssertionError(f"{argv[:3]}... exited {out.returncode}:\n{out.stdout[-3000:]}\n"
                             f"{out.stderr[-3000:]}")
    return out


REPLICATION = """
import json, sys
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from hanzo_stream.core.connection import Connection
admin = AdminClient(Connection.from_env().confluent())
md = admin.list_topics(timeout=60)
out = {"brokers": sorted(md.brokers)}
for t in sys.argv[1:]:
    res = ConfigResource(ResourceType.TOPIC, t)
    cfg = admin.describe_configs([res])[res].result(timeout=60)
    out[t] = {"rf": sorted({len(p.replicas) for p in md.topics[t].partitions.values()}),
              "min_isr": cfg["min.insync.replicas"].value}
print(json.dumps(out))
"""


def replication(stack: Stack, *topics: str) -> dict:
    """The brokers the cluster reports, and per topic its replication factors and min ISR:
    one admin client on the node's network (a JVM tool per question took minutes)."""
    out = in_node(stack.node, [sys.executable, "-c", REPLICATION, *topics],
                  env=stack.client_env("admin"))
    return json.loads(out.stdout)


@contextmanager
def load(stack: Stack, tag: str, rate: float = 100, principal: str = "llm-gateway",
         max_seconds: float = 1500, min_isr: int = 1) -> Iterator[dict]:
    """acks=all producers running for the block; afterwards `result` holds the Tally of every
    event they sent (read back as billing-aggregator, which may read llm_usage)."""
    ledger, stop = stack.work / f"ledger-{tag}.json", stack.work / f"stop-{tag}"
    stop.unlink(missing_ok=True)
    result: dict = {}
    with open(stack.work / f"load-{tag}.log", "w") as log:
        proc = subprocess.Popen(
            [*netns.exec_in(stack.node.addr), sys.executable, "-m", "hanzo_stream.kube.load",
             "produce", "--ledger", str(ledger), "--stop-file", str(stop), "--rate", str(rate),
             "--max-seconds", str(max_seconds), "--min-isr", str(min_isr)],
            cwd=ROOT, env=stack.client_env(principal), stdout=log, stderr=subprocess.STDOUT)
        try:  # producers up and acknowledged before the change starts
            wait_for(lambda: proc.poll() is not None or load_acked(ledger) >= ACKED_AT_START, 120,
                     "the load producers' first acknowledgements")
            if proc.poll() is not None:
                raise AssertionError(f"the load producer exited {proc.returncode}: "
                                     f"{(stack.work / f'load-{tag}.log').read_text()[-3000:]}")
            result["ledger"] = ledger
            yield result
        finally:
            stop.touch()
            proc.wait(timeout=300)
    out = in_node(stack.node, [sys.executable, "-m", "hanzo_stream.kube.load", "count",
                               "--ledger", str(ledger)], env=stack.client_env("billing-aggregator"))
    result |= json.loads(out.stdout)


ACKED_AT_START = 50  # half a second of the default rate
ACKED_AGAIN = 100  # a second of it: every partition written since


def acknowledged_again(result: dict, what: str) -> None:
    """Inside `with load(...) as result`: wait until the producers have had ACKED_AGAIN more
    events acknowledged (the condition the fixed 5 s waits before 2026-12-03 stood for)."""
    ledger = result["ledger"]
    start = load_acked(ledger)
    wait_for(lambda: load_acked(ledger) >= start + ACKED_AGAIN, 300,
             f"the producers acknowledged again after {what}")


def restarts(before: dict[str, dict], after: dict[str, dict]) -> int:
    """Broker restarts between two pod listings: pods recreated plus container restarts."""
    n = 0
    for name, pod in after.items():
        old = before.get(name)
        count = sum(c.get("restartCount", 0) for c in pod["status"].get("containerStatuses", [])
                    if c["name"] == "kafka")
        if old is None or old["metadata"]["uid"] != pod["metadata"]["uid"]:
            n += 1 + count
        else:
            n += count - sum(c.get("restartCount", 0) for c in old["status"].get("containerStatuses", [])
                             if c["name"] == "kafka")
    return n


def record(change: str, **facts: Any) -> None:
    """Append a change's plan, restarts, losses and errors to the session's report file."""
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    doc = json.loads(REPORT.read_text()) if REPORT.exists() else {}
    doc[change] = facts
    REPORT.write_text(json.dumps(doc, indent=1, sort_keys=True))
    print(f"\n{change}: {json.dumps(facts, sort_keys=True)}")


def brokers_ready(stack: Stack, n: int | None = None, name: str = "kafka") -> bool:
    """All brokers (n, or the StatefulSet's replicas) ready on its update revision: a roll
    has finished. (Not currentRevision: an OnDelete StatefulSet never advances it. And only
    once the controller has seen the template: right after `pulumi up` the status is still
    the last roll's.)"""
    sts = stack.json("statefulset", name)
    st, n = sts["status"], n or sts["spec"]["replicas"]
    return st.get("observedGeneration") == sts["metadata"]["generation"] \
        and st.get("readyReplicas") == n and st.get("updatedReplicas") == n


def checkout_with(tmp: Path, edit: Callable[[dict], None]) -> Path:
    """A checkout whose topics.yaml is this one's edited (a service team's pull request); the
    rest links to this checkout. Point a Deployer at it (deployer.root) to deploy it."""
    import yaml

    root = tmp / "checkout"
    root.mkdir()
    for d in ("consumers", "monitoring", "schemas", "spark", *(p.name for p in ROOT.glob("Pulumi*.yaml"))):
        (root / d).symlink_to(ROOT / d)
    doc = yaml.safe_load((ROOT / "topics.yaml").read_text())
    edit(doc)
    (root / "topics.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return root


ADMIN_PROPERTIES = "/opt/hanzo/run/admin.properties"


def admin_properties(stack: Stack, pod: str = "kafka-0") -> str:
    """docs/runbooks/scaling-1-to-3.md's admin client config, written as the runbook does: the
    JAAS line from the Secret through stdin into the pod's memory-backed run directory."""
    import base64

    jaas = stack.kubectl("get", "secret", "kafka-admin", "-o",
                         "jsonpath={.data.sasl\\.jaas\\.config}").stdout
    stack.kubectl("exec", "-i", pod, "-c", "kafka", "--", "sh", "-c",
                  "umask 077; { echo security.protocol=SASL_SSL; echo sasl.mechanism=PLAIN; "
                  "echo ssl.truststore.type=PEM; echo ssl.truststore.location=/etc/kafka/tls/ca.crt; "
                  f'printf "sasl.jaas.config=%s\\n" "$(cat)"; }} > {ADMIN_PROPERTIES}',
                  input=base64.b64decode(jaas).decode())
    return ADMIN_PROPERTIES


def change(stack: Stack, what: str, min_isr: int = 2, replace: list[str] | None = None,
           **settings: Any) -> dict:
    """A user's change under acks=all load: `pulumi up` (its steps are what a preview would
    have planned), wait until every broker is ready on the new revision; record and return
    what it cost. Nothing acknowledged may be lost and every send must be answered (asserted
    here, for every caller)."""
    before = stack.pods()
    t = time.monotonic()
    with load(stack, what.replace(" ", "-"), min_isr=min_isr) as result:
        stack.up(replace=replace, **settings)
        took, plan = time.monotonic() - t, stack.last_plan
        wait_for(lambda: brokers_ready(stack), 900, "every broker ready on the new revision")
        acknowledged_again(result, "the last broker came back")
    after = stack.pods()
    facts = {
        "planned": plan.ops(),
        "statefulset": plan.ops("StatefulSet").get("statefulset-kafka", "same"),
        "seconds": round(time.monotonic() - t), "up_seconds": round(took),
        "broker_restarts": restarts(before, {k: after[k] for k in before if k in after}),
        "brokers_added": sorted(set(after) - set(before)),
        **{k: result[k] for k in ("sent", "acked", "failed", "acked_lost", "unreported",
                                  "duplicated", "producer_errors", "under_min_isr_longest_s")},
        "error_samples": result["error_samples"][:3], "failed_samples": result["failed_samples"][:3],
    }
    record(what, **facts)
    assert result["acked"] > 0
    assert result["acked_lost"] == 0 and result["unreported"] == 0, facts
    assert facts["statefulset"] != "replace", facts
    return facts
