"""Broker certificates: cert-manager when the stack says so, else generated in the program.

Either way the result is the Secret `kafka-tls` with tls.crt, tls.key (PKCS#8, which
Kafka's PEM keystore requires) and ca.crt; brokers mount all of it, clients mount only
ca.crt. Generated keys are pulumi-tls resources: Pulumi secrets in state, never files.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_tls as tls

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
    private_keys: list[pulumi.Output]  # for the plain-text scan of the rendered output


def build(s: StackSettings, top: Topology) -> Tls:
    if s.tlsMode == "cert-manager":
        return Tls([certificate(s, top)], None, None, [])
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
    keep = pulumi.ResourceOptions(protect=s.protect)
    ca_key = tls.PrivateKey("kafka-ca-key", algorithm="ECDSA", ecdsa_curve="P256", opts=keep)
    ca = tls.SelfSignedCert(
        "kafka-ca", private_key_pem=ca_key.private_key_pem, is_ca_certificate=True,
        subject={"common_name": "Hanzo Stream Kafka CA", "organization": "Hanzo"},
        validity_period_hours=CA_VALIDITY_HOURS,
        allowed_uses=["cert_signing", "crl_signing", "digital_signature"], opts=keep)
    key = tls.PrivateKey("kafka-broker-key", algorithm="ECDSA", ecdsa_curve="P256")
    csr = tls.CertRequest(
        "kafka-broker-csr", private_key_pem=key.private_key_pem,
        subject={"common_name": f"{top.client_service}.{top.namespace}.svc",
                 "organization": "Hanzo"},
        dns_names=top.dns_names(s.tlsExtraDnsNames))
    cert = tls.LocallySignedCert(
        "kafka-broker-cert", cert_request_pem=csr.cert_request_pem,
        ca_private_key_pem=ca_key.private_key_pem, ca_cert_pem=ca.cert_pem,
        validity_period_hours=CERT_VALIDITY_HOURS, early_renewal_hours=RENEW_BEFORE_HOURS,
        allowed_uses=["digital_signature", "key_encipherment", "server_auth", "client_auth"])
    secret = {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": TLS_SECRET, "namespace": top.namespace,
                     "labels": labels("tls", TLS_SECRET)},
        "stringData": pulumi.Output.secret({
            "tls.crt": pulumi.Output.concat(cert.cert_pem, ca.cert_pem),
            "tls.key": key.private_key_pem_pkcs8,
            "ca.crt": ca.cert_pem,
        }),
    }
    return Tls([secret], ca.cert_pem, cert.cert_pem,
               [pulumi.Output.secret(ca_key.private_key_pem),
                pulumi.Output.secret(key.private_key_pem_pkcs8)])


def ca_volume(name: str = "kafka-ca") -> dict:
    """A volume with only ca.crt from the TLS Secret, for client pods."""
    return {"name": name, "secret": {"secretName": TLS_SECRET,
                                     "items": [{"key": "ca.crt", "path": "ca.crt"}]}}


CA_MOUNT = "/etc/hanzo-stream/kafka-ca"
CA_FILE = f"{CA_MOUNT}/ca.crt"
