"""Policy checks in the spirit of CrossGuard, over the manifests the program renders.

They run twice: inside the program before anything is registered (a violation fails
`pulumi preview` and `pulumi up`), and in the unit tests over the complete rendered
output of each stack, where the resolved secrets are known and the plain-text scan runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from hanzo_stream.pods.takeover import LEGACY

from .broker import FLAVORS, properties_from_env
from .topology import PART_OF


@dataclass(frozen=True)
class Violation:
    rule: str
    resource: str
    message: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.resource}: {self.message}"


class PolicyViolation(Exception):
    def __init__(self, violations: list[Violation]):
        self.violations = violations
        super().__init__("policy violations:\n" + "\n".join(f"  {v}" for v in violations))


def _name(m: dict) -> str:
    return f"{m.get('kind')}/{m.get('metadata', {}).get('name')}"


def pod_templates(m: dict) -> Iterator[dict]:
    spec = m.get("spec") or {}
    if m.get("kind") in ("StatefulSet", "Deployment", "Job"):
        yield spec.get("template", {})
    if m.get("kind") == "CronJob":
        yield spec.get("jobTemplate", {}).get("spec", {}).get("template", {})


def pod_specs(m: dict) -> Iterator[dict]:
    for t in pod_templates(m):
        yield t.get("spec", {})


def images(m: dict) -> Iterator[str]:
    for ps in pod_specs(m):
        for c in [*ps.get("initContainers", []), *ps.get("containers", [])]:
            yield c.get("image", "")
    if m.get("kind") == "SparkApplication":
        spec = m.get("spec", {})
        yield spec.get("image", "")
        for part in ("driver", "executor"):
            if "image" in spec.get(part, {}):
                yield spec[part]["image"]


_PINNED = re.compile(r"^[^@\s]+(:[\w][\w.-]{0,127})?(@sha256:[0-9a-f]{64})?$")


def image_problem(image: str, require_digest: bool) -> str | None:
    if not isinstance(image, str) or not image:
        return "no image"
    if not _PINNED.match(image):
        return f"{image!r} is not a valid image reference"
    digest = "@sha256:" in image
    name = image.split("@")[0]
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else None
    if require_digest and not digest:
        return f"{image} is not pinned by digest"
    if not digest and (tag is None or tag == "latest"):
        return f"{image} floats (no tag or :latest); pin a version tag or a digest"
    return None


def brokers(manifests: Iterable[dict]) -> list[dict]:
    return [m for m in manifests if m.get("kind") == "StatefulSet"
            and m["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "broker"]


def broker_properties(sts: dict) -> dict[str, str]:
    """The shared broker properties, read back from the StatefulSet's env by convention."""
    env = sts["spec"]["template"]["spec"]["containers"][0]["env"]
    flavor = FLAVORS["bitnami" if any(e["name"].startswith("KAFKA_CFG_") for e in env)
                     else "apache"]
    return properties_from_env(flavor, env)


def check(manifests: list[dict], environment: str, require_digests: bool = False,
          secret_values: Iterable[str] = ()) -> list[Violation]:
    out: list[Violation] = []
    out += check_replication(manifests, environment)
    out += check_images(manifests, require_digests)
    out += check_listeners(manifests)
    out += check_network_policies(manifests)
    out += check_plain_text(manifests, secret_values)
    return out


def check_replication(manifests: list[dict], environment: str) -> list[Violation]:
    out = []
    stss = brokers(manifests)
    if not stss:
        return [Violation("cluster", "StatefulSet/kafka", "no broker StatefulSet rendered")]
    if environment != "prod":
        return out
    for sts in stss:
        props, n = broker_properties(sts), _name(sts)
        if sts["spec"]["replicas"] < 3:
            out.append(Violation("prod-replication", n, "prod needs 3 or more brokers"))
        for key in ("default.replication.factor", "offsets.topic.replication.factor",
                    "transaction.state.log.replication.factor"):
            if int(props.get(key, "1")) < 3:
                out.append(Violation("prod-replication", n, f"{key} must be >= 3 in prod"))
        for key in ("min.insync.replicas", "transaction.state.log.min.isr"):
            if int(props.get(key, "1")) < 2:
                out.append(Violation("prod-replication", n, f"{key} must be >= 2 in prod"))
        if props.get("unclean.leader.election.enable") != "false":
            out.append(Violation("prod-replication", n, "unclean leader election must be off"))
    return out


def check_images(manifests: list[dict], require_digests: bool) -> list[Violation]:
    return [Violation("images-pinned", _name(m), p) for m in manifests for img in images(m)
            if (p := image_problem(img, require_digests))]


def legacy_window_missing(registry_file: object) -> Violation:
    return Violation(
        "legacy-plaintext-window", "config legacyPlaintextPort",
        f"the LEGACY PLAINTEXT listener is on but {registry_file} declares no `legacy_plaintext:` "
        "window: add one (stands_in_for: the principals its clients act as; until: the last day, "
        "docs/registry.md) so the transition has an end, or `pulumi config rm legacyPlaintextPort`")


def _legacy_port(props: dict[str, str]) -> int | None:
    for entry in props.get("listeners", "").split(","):
        if entry.startswith(f"{LEGACY}://"):
            return int(entry.rsplit(":", 1)[1])
    return None


def _namespace_only(policies: list[dict], pod_labels: dict, port: int) -> str | None:
    """Why `port` of these pods is open to more than the namespace's own pods, or None."""
    rules = [r for p in policies if _selects(p["spec"]["podSelector"], pod_labels)
             for r in p["spec"].get("ingress", [])
             if not r.get("ports") or any(x.get("port") == port for x in r["ports"])]
    if not rules:
        return f"no NetworkPolicy admits port {port}; it must admit the namespace's pods only"
    for r in rules:
        peers = r.get("from") or [{}]
        if any(set(peer) != {"podSelector"} for peer in peers):
            return (f"a NetworkPolicy admits port {port} from {peers}: only pods of the "
                    "namespace may reach it (a podSelector without namespaceSelector)")
    return None


def check_listeners(manifests: list[dict]) -> list[Violation]:
    out = []
    policies = [m for m in manifests if m.get("kind") == "NetworkPolicy"]
    for sts in brokers(manifests):
        props, n = broker_properties(sts), _name(sts)
        protocols = dict(x.split(":", 1) for x in props.get("listener.security.protocol.map",
                                                            "").split(",") if ":" in x)
        for listener, proto in protocols.items():
            if listener == LEGACY and proto == "PLAINTEXT" and (port := _legacy_port(props)):
                # A taken-over cluster's old clients (legacyPlaintextPort), inside the namespace.
                why = _namespace_only(policies, sts["spec"]["template"]["metadata"]["labels"], port)
                if why:
                    out.append(Violation("no-plaintext", n, f"listener {LEGACY}: {why}"))
            elif proto != "SASL_SSL":
                out.append(Violation("no-plaintext", n, f"listener {listener} uses {proto}"))
        for entry in props.get("listeners", "").split(","):
            name = entry.split("://", 1)[0]
            if name not in protocols:
                out.append(Violation("no-plaintext", n, f"listener {name} has no protocol "
                                     "mapping (it would default to PLAINTEXT)"))
        if props.get("ssl.enabled.protocols") != "TLSv1.3":
            out.append(Violation("no-plaintext", n, "TLS 1.3 only"))
    for m in manifests:
        for ps in pod_specs(m):
            for c in ps.get("containers", []):
                for e in c.get("env", []):
                    if e.get("name", "").endswith("SECURITY_PROTOCOL") and \
                            e.get("value") not in (None, "SASL_SSL"):
                        out.append(Violation("no-plaintext", _name(m),
                                             f"{e['name']}={e['value']}"))
    return out


def _selects(selector: dict, pod_labels: dict) -> bool:
    return all(pod_labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def check_network_policies(manifests: list[dict]) -> list[Violation]:
    out = []
    policies = [m for m in manifests if m.get("kind") == "NetworkPolicy"]
    deny = [p for p in policies if not p["spec"].get("ingress")
            and "Ingress" in p["spec"].get("policyTypes", [])]
    if not deny:
        out.append(Violation("networkpolicy", "NetworkPolicy/*", "no default-deny policy"))
    for m in manifests:
        for template in pod_templates(m):
            pod_labels = template.get("metadata", {}).get("labels", {})
            if pod_labels.get("app.kubernetes.io/part-of") != PART_OF:
                out.append(Violation("networkpolicy", _name(m), "pods lack the part-of label "
                                     "the default-deny policy selects"))
            elif not any(_selects(p["spec"]["podSelector"], pod_labels) for p in deny):
                out.append(Violation("networkpolicy", _name(m), "no default-deny policy "
                                     "selects these pods"))
    for sts in brokers(manifests):
        pod_labels = sts["spec"]["template"]["metadata"]["labels"]
        if not any(_selects(p["spec"]["podSelector"], pod_labels) and p["spec"].get("ingress")
                   for p in policies):
            out.append(Violation("networkpolicy", _name(sts), "no policy opens the broker ports"))
    return out


def _without_secret_data(m: dict) -> dict:
    if m.get("kind") == "Secret":
        return {k: v for k, v in m.items() if k not in ("data", "stringData")}
    return m


def check_plain_text(manifests: list[dict], secret_values: Iterable[str]) -> list[Violation]:
    """Every secret value may appear only inside a Secret's data; search everything else."""
    values = [v for v in secret_values if isinstance(v, str) and len(v) >= 8]
    out = []
    for m in manifests:
        text = json.dumps(_without_secret_data(m), default=str)
        for v in values:
            probes = {v, json.dumps(v)[1:-1]}  # as is, and as it looks inside JSON text
            if any(p in text for p in probes):
                out.append(Violation("no-plaintext-secrets", _name(m),
                                     f"a secret value ({v[:4]}...) appears in plain text"))
    return out


def plainify(value: Any) -> Any:
    """A copy with every pulumi Output (unknown until deployment) replaced by None, so the
    program can check its manifests before registering them."""
    if isinstance(value, dict):
        return {k: plainify(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plainify(v) for v in value]
    return value if isinstance(value, str | int | float | bool) else None
