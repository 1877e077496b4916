"""Broker certificates: cert-manager when the stack says so, else generated in the program.

Either way the result is the Secret `kafka-tls` with tls.crt, tls.key (PKCS#8, which
Kafka's PEM keystore requires) and ca.crt; brokers mount all of it, clients mount only
ca.crt. Generated keys live in Pulumi state as secrets (infra/generated.py), never in files.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import pulumi

from . import generated
from .broker import TLS_SECRET
from .settings import PROJECT, SettingsError, StackSettings
from .topology import Topology, labels

CA_VALIDITY_HOURS = 10 * 365 * 24
CERT_VALIDITY_HOURS = 397 * 24
RENEW_BEFORE_HOURS = 30 * 24


@dataclass
class Tls:
    manifests: list[dict]
    ca_cert_pem: pulumi.Output | None  # the trust bundle; None with cert-manager (the issuer's)
    cert_pem: pulumi.Output | None


def build(s: StackSettings, top: Topology, opts: pulumi.ResourceOptions | None = None) -> Tls:
    if s.tlsMode == "cert-manager":
        return Tls([certificate(s, top)], None, None)
    return self_signed(s, top, opts)


def certificate(s: StackSettings, top: Topology) -> dict:
    return {
        "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
        "metadata": {"name": "kafka-broker", "namespace": top.namespace,
                     "labels": top.broker_labels},
        "spec": {
            "secretName": TLS_SECRET,
            "issuerRef": {"name": s.certManagerIssuer, "kind": s.certManagerIssuerKind,
                          "group": "cert-manager.io"},
            "commonName": f"{top.client_service}.{top.namespace}.svc",
            "dnsNames": top.dns_names(s.tlsExtraDnsNames),
            "duration": f"{CERT_VALIDITY_HOURS}h",
            "renewBefore": f"{RENEW_BEFORE_HOURS}h",
            "privateKey": {"algorithm": "ECDSA", "size": 256, "encoding": "PKCS8",
                           "rotationPolicy": "Always"},
            "usages": ["server auth", "client auth", "digital signature", "key encipherment"],
        },
    }


def ca_name(generation: int) -> str:
    """The CA's resource name: generation 1 keeps the name stacks have had from the start."""
    return "kafka-ca" if generation == 1 else f"kafka-ca-{generation}"


def self_signed(s: StackSettings, top: Topology,
                opts: pulumi.ResourceOptions | None = None) -> Tls:
    """The CAs of the trusted generations and the brokers' certificate, issued by the one of
    `caGeneration`. A CA is never re-issued; only the issuing one is protected, so the up that
    retires the other (drops it from caTrust) can delete it. The broker certificate is
    re-issued by the `pulumi up` that runs within RENEW_BEFORE_HOURS of its expiry, after its
    names change, or when the issuing generation changes (infra/generated.py). `ca.crt` is
    the bundle of every trusted CA, oldest first; `caCertPem` exports the same bundle."""
    cas = {g: generated.CertificateAuthority(
        ca_name(g), common_name="Hanzo Stream Kafka CA" + ("" if g == 1 else f" {g}"),
        organization="Hanzo", validity_hours=CA_VALIDITY_HOURS,
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
            protect=s.protect and g == s.caGeneration)))
        for g in s.ca_trust}
    issuer = cas[s.caGeneration]
    cert = generated.BrokerCertificate(
        "kafka-broker-cert", issuer, common_name=f"{top.client_service}.{top.namespace}.svc",
        organization="Hanzo", dns_names=top.dns_names(s.tlsExtraDnsNames),
        validity_hours=CERT_VALIDITY_HOURS, renew_before_hours=RENEW_BEFORE_HOURS, opts=opts)
    bundle = pulumi.Output.concat(*(cas[g].cert_pem for g in sorted(cas)))
    secret = {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": TLS_SECRET, "namespace": top.namespace,
                     "labels": labels("tls", TLS_SECRET)},
        "stringData": pulumi.Output.secret({
            "tls.crt": pulumi.Output.concat(cert.cert_pem, issuer.cert_pem),
            "tls.key": cert.private_key_pem,
            "ca.crt": bundle,
        }),
    }
    return Tls([secret], bundle, cert.cert_pem)


# --- rollover --------------------------------------------------------------------------------

GENERATION_OUTPUT, TRUST_OUTPUT = "caGeneration", "caTrust"  # what the next up compares with
TRUST_ANNOTATION = "hanzo.ai/ca-trust-sha"  # on the pod templates of clients that read ca.crt


class RolloverRefused(SettingsError):
    """caGeneration or caTrust skips a step of the rollover; nothing was changed."""


def check_rollover(generation: int, trust: list[int], last_generation: Any, last_trust: Any,
                   deployed: bool) -> None:
    """Refuse a certificate from a CA that the last deployment did not hand to clients, and a
    retired CA coming back (its key is gone: it would be a new CA under an old number)."""
    if not deployed:
        return
    was = [int(t) for t in last_trust] if last_trust else [int(last_generation or 1)]
    message = ""
    if generation not in was:
        message = (
            f"{PROJECT}:caGeneration is {generation} but the last `pulumi up` gave clients the "
            f"CA generations {was} only: every client would refuse brokers serving a "
            f"certificate of generation {generation}. Nothing was changed. Trust it first: "
            f"`pulumi config set caGeneration {max(was)}`, `pulumi config set caTrust "
            f"'[{max(was)}, {generation}]'`, `pulumi up`, and give clients outside the cluster "
            f"the new caCertPem; then set caGeneration {generation} "
            "(docs/runbooks/ca-rollover.md)")
    retired = sorted(t for t in trust if t not in was and t < max(was))
    if retired:
        message = (
            f"{PROJECT}:caTrust names generation {retired[0]}, which the last `pulumi up` had "
            f"retired (it trusted {was}): its key is gone and it cannot come back. Nothing was "
            f"changed. Roll forward to generation {max(was) + 1} instead "
            "(docs/runbooks/ca-rollover.md)")
    if message:
        pulumi.log.error(message)  # the reason first, as a plain diagnostic
        raise RolloverRefused(message)


def guard(s: StackSettings, last: pulumi.StackReference) -> pulumi.Output:
    """Resolves once caGeneration and caTrust follow from the last deployment's."""
    if s.tlsMode != "self-signed":
        return pulumi.Output.from_input(None)
    return pulumi.Output.all(last.get_output(GENERATION_OUTPUT), last.get_output(TRUST_OUTPUT),
                             last.get_output("caCertPem")).apply(
        lambda v: check_rollover(s.caGeneration, s.ca_trust, v[0], v[1], v[2] is not None))


def restart_on_new_trust(manifests: list[dict], bundle: pulumi.Output | None) -> None:
    """Clients read ca.crt when they start: a digest of the bundle on the pod templates of
    those that mount it restarts them when it changes (a rollover's first and last step).
    Brokers are not passed here: their tls-reload sidecar reloads it. Jobs are left out:
    their templates are immutable, and the next run reads the new file."""
    if bundle is None:
        return
    digest = bundle.apply(lambda pem: hashlib.sha256(pem.encode()).hexdigest()[:16])
    for m in manifests:
        kind, spec = m.get("kind"), m.get("spec", {})
        if kind in ("Deployment", "StatefulSet", "DaemonSet"):
            pod, meta = spec["template"]["spec"], [spec["template"].setdefault("metadata", {})]
        elif kind == "SparkApplication":
            pod, meta = spec, [spec.setdefault(r, {}) for r in ("driver", "executor")]
        else:
            continue
        if any(v.get("secret", {}).get("secretName") == TLS_SECRET for v in pod.get("volumes", ())):
            for x in meta:
                x.setdefault("annotations", {})[TRUST_ANNOTATION] = digest


def ca_volume(name: str = "kafka-ca") -> dict:
    """A volume with only ca.crt from the TLS Secret, for client pods."""
    return {"name": name, "secret": {"secretName": TLS_SECRET,
                                     "items": [{"key": "ca.crt", "path": "ca.crt"}]}}


CA_MOUNT = "/etc/hanzo-stream/kafka-ca"
CA_FILE = f"{CA_MOUNT}/ca.crt"
