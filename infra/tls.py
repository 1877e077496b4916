"""Broker certificates: cert-manager when the stack says so, else generated in the program.

Either way the result is the Secret `kafka-tls` with tls.crt, tls.key (PKCS#8, which
Kafka's PEM keystore requires) and ca.crt; brokers mount all of it, clients mount only
ca.crt. Generated keys live in Pulumi state as secrets (infra/generated.py), never in files.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from . import generated
from .broker import TLS_SECRET
from .settings import StackSettings
from .topology import Topology, labels

CA_VALIDITY_HOURS = 10 * 365 * 24
CERT_VALIDITY_HOURS = 397 * 24
RENEW_BEFORE_HOURS = 30 * 24


@dataclass
class Tls:
    manifests: list[dict]
    ca_cert_pem: pulumi.Output | None  # None with cert-manager: the issuer owns the CA
    cert_pem: pulumi.Output | None


def build(s: StackSettings, top: Topology) -> Tls:
    if s.tlsMode == "cert-manager":
        return Tls([certificate(s, top)], None, None)
    return self_signed(s, top)


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


def self_signed(s: StackSettings, top: Topology) -> Tls:
    """A CA (protected, never re-issued) and the brokers' certificate it signs; the broker
    certificate is re-issued by the `pulumi up` that runs within RENEW_BEFORE_HOURS of its
    expiry, or after its names change (infra/generated.py)."""
    ca = generated.CertificateAuthority(
        "kafka-ca", common_name="Hanzo Stream Kafka CA", organization="Hanzo",
        validity_hours=CA_VALIDITY_HOURS, opts=pulumi.ResourceOptions(protect=s.protect))
    cert = generated.BrokerCertificate(
        "kafka-broker-cert", ca, common_name=f"{top.client_service}.{top.namespace}.svc",
        organization="Hanzo", dns_names=top.dns_names(s.tlsExtraDnsNames),
        validity_hours=CERT_VALIDITY_HOURS, renew_before_hours=RENEW_BEFORE_HOURS)
    secret = {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": TLS_SECRET, "namespace": top.namespace,
                     "labels": labels("tls", TLS_SECRET)},
        "stringData": pulumi.Output.secret({
            "tls.crt": pulumi.Output.concat(cert.cert_pem, ca.cert_pem),
            "tls.key": cert.private_key_pem,
            "ca.crt": ca.cert_pem,
        }),
    }
    return Tls([secret], ca.cert_pem, cert.cert_pem)


def ca_volume(name: str = "kafka-ca") -> dict:
    """A volume with only ca.crt from the TLS Secret, for client pods."""
    return {"name": name, "secret": {"secretName": TLS_SECRET,
                                     "items": [{"key": "ca.crt", "path": "ca.crt"}]}}


CA_MOUNT = "/etc/hanzo-stream/kafka-ca"
CA_FILE = f"{CA_MOUNT}/ca.crt"
