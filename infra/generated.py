"""Values the program generates once and then keeps: passwords, the
record of the quorum's founding size, the CA and the broker certificate.

Pulumi dynamic providers (`pulumi.dynamic`) rather than the random and tls provider plugins:
their provider process is Python, so nothing but this repository has to be built. Each
value is made in `create` only and kept in Pulumi state, the secret ones as secrets
(`additional_secret_outputs`). Each provider's `diff` compares only the inputs that matter,
never the serialized provider, so a change to this code replaces nothing; a later
`pulumi up` keeps every value. Rotation is explicit: `pulumi up --replace <urn>`. The one
value that changes by itself is the broker certificate: it is re-issued when an up runs
within its renewal window, or when its names or its CA change.

The engine runs these providers in a process of their own (`pulumi-resource-pulumi-python`,
i.e. `python -u -m pulumi.dynamic`), which unpickles each provider (dill) by reference to
this module. That process needs the repository root on PYTHONPATH (the Automation API
runner sets it) so that `infra.generated` imports. Hence this module has no import-time side
effects, imports nothing heavier than pulumi.dynamic at load (cryptography is imported
where it is used), and its provider classes keep their names: state refers to them.
"""

from __future__ import annotations

import secrets
import string
from datetime import UTC, datetime, timedelta
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider

ALPHANUMERIC = string.ascii_letters + string.digits


def _id() -> str:
    """A resource id that tells nothing about the value."""
    return secrets.token_hex(8)


def _secret(opts: pulumi.ResourceOptions | None, *outputs: str) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions.merge(
        opts, pulumi.ResourceOptions(additional_secret_outputs=list(outputs)))


class KeptProvider(ResourceProvider):
    """A value made once: diff never sees a change (only `--replace` makes a new one), and
    read returns what state holds, the only copy there is."""

    def diff(self, _id: str, _olds: dict[str, Any], _news: dict[str, Any]) -> DiffResult:
        return DiffResult(changes=False)

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        return ReadResult(id_, props)


class PasswordProvider(KeptProvider):
    """Alphanumeric only: passwords end up in JAAS strings, which have no escaping."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        length = int(props["length"])
        value = "".join(secrets.choice(ALPHANUMERIC) for _ in range(length))
        return CreateResult(_id(), {"length": length, "result": value})


class RecordProvider(KeptProvider):
    """Keeps the value it was created with; later inputs never reach `result`."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(_id(), {"value": props["value"], "result": props["value"]})


class Password(Resource, name="Password"):
    result: pulumi.Output[str]

    def __init__(self, name: str, length: int = 32, opts: pulumi.ResourceOptions | None = None):
        super().__init__(PasswordProvider(), name, {"length": length, "result": None},
                         _secret(opts, "result"))


class Record(Resource, name="Record"):
    """A number recorded at the stack's first `pulumi up` (not a secret: nothing random)."""

    result: pulumi.Output[float]

    def __init__(self, name: str, value: int, opts: pulumi.ResourceOptions | None = None):
        keep = pulumi.ResourceOptions(ignore_changes=["value"])  # state keeps the first value too
        super().__init__(RecordProvider(), name, {"value": value, "result": None},
                         pulumi.ResourceOptions.merge(opts, keep))


# --- certificates -------------------------------------------------------------------------


def _pkcs8(key: Any) -> str:
    """PKCS#8 PEM: the only private key format Kafka's PEM keystore reads."""
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _sign(subject: dict[str, str], issuer_cert: Any, issuer_key: Any, hours: float,
          dns_names: list[str] | None = None) -> tuple[str, str, str]:
    """A new ECDSA P-256 key and its certificate: a CA when `issuer_cert` is None (self-signed),
    else a TLS server+client certificate for `dns_names`. Returns (cert PEM, key PEM, not_after)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject["common_name"]),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, subject["organization"])])
    ca = issuer_cert is None
    now = datetime.now(UTC)
    usage = dict.fromkeys(("content_commitment", "data_encipherment", "key_agreement",
                           "encipher_only", "decipher_only"), False)
    b = (x509.CertificateBuilder().subject_name(name)
         .issuer_name(name if ca else issuer_cert.subject)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now).not_valid_after(now + timedelta(hours=float(hours)))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
         .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
         .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=not ca,
                                      key_cert_sign=ca, crl_sign=ca, **usage), critical=True))
    if not ca:
        b = (b.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                 issuer_key.public_key()), critical=False)
             .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                   ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
             .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names or ()]),
                            critical=False))
    cert = b.sign(key if ca else issuer_key, hashes.SHA256())
    return (cert.public_bytes(serialization.Encoding.PEM).decode(), _pkcs8(key),
            cert.not_valid_after_utc.isoformat())


def renewal_due(not_after: str | None, renew_before_hours: float,
                now: datetime | None = None) -> bool:
    """True once `now` is within `renew_before_hours` of expiry (or the expiry is unknown)."""
    if not not_after:
        return True
    expiry = datetime.fromisoformat(not_after)
    return (now or datetime.now(UTC)) >= expiry - timedelta(hours=float(renew_before_hours))


SUBJECT = ("common_name", "organization")


class CertificateAuthorityProvider(KeptProvider):
    """A self-signed CA, never re-issued: a new CA means every client needs the new ca.crt."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        cert, key, not_after = _sign(props, None, None, props["validity_hours"])
        return CreateResult(_id(), {**{k: props[k] for k in (*SUBJECT, "validity_hours")},
                                    "cert_pem": cert, "private_key_pem": key, "not_after": not_after})


class BrokerCertificateProvider(ResourceProvider):
    """The brokers' key and certificate, signed by the CA; re-issued (a replacement, with a
    new key) when its subject, names or CA change, or when an up runs in the renewal window."""

    ISSUED_FOR = (*SUBJECT, "dns_names", "ca_cert_pem")

    def create(self, props: dict[str, Any]) -> CreateResult:
        from cryptography import x509
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        ca_cert = x509.load_pem_x509_certificate(props["ca_cert_pem"].encode())
        ca_key = load_pem_private_key(props["ca_private_key_pem"].encode(), None)
        cert, key, not_after = _sign(props, ca_cert, ca_key, props["validity_hours"],
                                     list(props["dns_names"]))
        kept = (*self.ISSUED_FOR, "validity_hours", "renew_before_hours")
        return CreateResult(_id(), {**{k: props[k] for k in kept}, "cert_pem": cert,
                                    "private_key_pem": key, "not_after": not_after})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = [k for k in self.ISSUED_FOR if olds.get(k) != news.get(k)]
        if renewal_due(olds.get("not_after"), news["renew_before_hours"]):
            replaces.append("not_after")
        return DiffResult(changes=bool(replaces), replaces=replaces)

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        return ReadResult(id_, props)


class CertificateAuthority(Resource, name="CertificateAuthority"):
    cert_pem: pulumi.Output[str]
    private_key_pem: pulumi.Output[str]
    not_after: pulumi.Output[str]

    def __init__(self, name: str, common_name: str, organization: str, validity_hours: int,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(CertificateAuthorityProvider(), name, {
            "common_name": common_name, "organization": organization,
            "validity_hours": validity_hours,
            "cert_pem": None, "private_key_pem": None, "not_after": None,
        }, _secret(opts, "private_key_pem"))


class BrokerCertificate(Resource, name="BrokerCertificate"):
    cert_pem: pulumi.Output[str]
    private_key_pem: pulumi.Output[str]  # PKCS#8
    not_after: pulumi.Output[str]

    def __init__(self, name: str, ca: CertificateAuthority, common_name: str, organization: str,
                 dns_names: list[str], validity_hours: int, renew_before_hours: int,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(BrokerCertificateProvider(), name, {
            "ca_cert_pem": ca.cert_pem, "ca_private_key_pem": pulumi.Output.secret(ca.private_key_pem),
            "common_name": common_name, "organization": organization, "dns_names": dns_names,
            "validity_hours": validity_hours, "renew_before_hours": renew_before_hours,
            "cert_pem": None, "private_key_pem": None, "not_after": None,
        }, _secret(opts, "private_key_pem"))
