"""A renewed broker certificate served without a restart (Kafka's dynamic reconfiguration).

A broker reads its PEM keystore at start. Kafka re-reads a keystore or truststore whose file
changed when it is sent a per-broker config update naming the same location (KIP-226), so a
renewal is: check the new pair, write it over the old file atomically, then ask each broker to
"set" its listeners' unchanged store locations. No connection drops; the new certificate is
presented to the next handshake.

Kafka refuses, in place, a keystore whose subject or SANs differ from the one it serves, and
a broker that got half a file, a key of another certificate or a certificate it does not
trust yet would fail its next handshake, so check() refuses all of those before anything is
written. A CA rollover is two such changes: the bundle of both CAs, then (TRUST_SETTLE_SECONDS
later at least) the certificates of the new CA; and, once every client trusts the new CA,
a bundle without the old one.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import socket
import ssl
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from .broker_config import CLIENT, INTERNAL
from .secret_files import write_secret

#: The listeners whose store locations are sent. Kafka then re-reads every store file that
#: changed, the CONTROLLER listener's and the clients between brokers and controllers included
#: (tests/integration/test_tls_reload.py shows each serving the new certificate).
RELOADED_LISTENERS = (CLIENT, INTERNAL)
#: Between a new trust bundle and certificates from the new CA. A truststore reload shows in
#: no handshake, and a broker that sees both files changed at once validates the new
#: certificate against its old truststore, refuses it and keeps refusing until restarted
#: (seen here when the certificate followed the bundle by half a second).
TRUST_SETTLE_SECONDS = 10


class Refused(ValueError):
    """A new keystore that must not be installed: the message says why and what to fix."""


@dataclass(frozen=True)
class Keystore:
    certificate: x509.Certificate
    public_key_der: bytes  # of the private key in the file

    @property
    def sans(self) -> list[str]:
        try:
            ext = self.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        except x509.ExtensionNotFound:
            return []
        return sorted(str(n.value) for n in ext.value)


def _public_der(key_or_cert) -> bytes:
    """The SubjectPublicKeyInfo of a private key or a certificate: equal when they match."""
    return key_or_cert.public_key().public_bytes(serialization.Encoding.DER,
                                                 serialization.PublicFormat.SubjectPublicKeyInfo)


def parse(pem: bytes, what: str) -> Keystore:
    """A PEM keystore as Kafka reads it: one unencrypted PKCS#8 key, then the chain, leaf first."""
    try:
        key = serialization.load_pem_private_key(pem, password=None)
        chain = x509.load_pem_x509_certificates(pem)
    except (ValueError, TypeError) as e:
        raise Refused(f"{what}: not a PEM keystore (an unencrypted private key and its "
                      f"certificate chain, leaf first): {e}") from e
    return Keystore(chain[0], _public_der(key))


def check(current: bytes, new: bytes, trusted: bytes, what: str = "new keystore",
          now: dt.datetime | None = None) -> Keystore:
    """The new keystore, if a broker serving `current` and trusting the CAs in `trusted` may
    switch to it in place."""
    old, nxt = parse(current, "current keystore"), parse(new, what)
    cert = nxt.certificate
    if _public_der(cert) != nxt.public_key_der:
        raise Refused(f"{what}: its private key does not belong to its first certificate; "
                      "the file must hold the key, then that key's certificate, then the CA")
    now = now or dt.datetime.now(dt.UTC)
    if not cert.not_valid_before_utc <= now < cert.not_valid_after_utc:
        raise Refused(f"{what}: certificate valid {cert.not_valid_before_utc:%Y-%m-%d %H:%M} to "
                      f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC, not now; reissue it")
    if cert.subject != old.certificate.subject or nxt.sans != old.sans:
        raise Refused(
            f"{what}: subject {cert.subject.rfc4514_string()!r} and names {nxt.sans} differ from "
            f"the served {old.certificate.subject.rfc4514_string()!r} and {old.sans}; Kafka "
            "changes neither in place, so a new name needs a rolling restart")
    if not any(_issued_by(cert, ca) for ca in x509.load_pem_x509_certificates(trusted)):
        raise Refused(
            f"{what}: issued by {cert.issuer.rfc4514_string()!r}, which the brokers do not trust "
            "yet; a new CA goes first into the trust bundle (old and new CA), reloaded on every "
            f"broker for TRUST_SETTLE_SECONDS ({TRUST_SETTLE_SECONDS} s), then the certificates")
    return nxt


def _issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def install(path: Path, pem: bytes) -> None:
    """Write `pem` over `path` in one rename (0600): a broker reading it sees the old file or
    the new one, never half of each."""
    write_secret(path, pem)


def reload_configs(config: Mapping[str, str],
                   listeners: Iterable[str] = RELOADED_LISTENERS) -> dict[str, str]:
    """Each listener's store locations, as the broker has them (its own, else the default):
    sending these unchanged values is what makes it re-read files that changed."""
    out = {}
    for listener in listeners:
        for store in ("keystore", "truststore"):
            name = f"ssl.{store}.location"
            value = config.get(f"listener.name.{listener.lower()}.{name}", config.get(name))
            if value:
                out[f"listener.name.{listener.lower()}.{name}"] = value
    return out


def reload(admin, node_id: int, configs: Mapping[str, str], timeout: float = 30.0) -> None:
    """Ask broker `node_id` to re-read its stores (a per-broker IncrementalAlterConfigs: the
    broker itself validates and reloads them, and says so in its error if it cannot)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.BROKER, str(node_id), incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=timeout)


def served(host: str, port: int, ca_file: str | None = None, timeout: float = 10.0) -> str:
    """SHA-256 of the certificate a listener presents now (verified against ca_file if given)."""
    ctx = ssl.create_default_context(cafile=ca_file)
    if not ca_file:  # asked only which certificate is served, not whether it is trusted
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection((host, port), timeout=timeout) as sock, \
            ctx.wrap_socket(sock, server_hostname=host) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return hashlib.sha256(der).hexdigest()


def _served_or_why(address: tuple[str, int], ca_file: str | None) -> str:
    try:
        return served(*address, ca_file)
    except ssl.SSLCertVerificationError as e:  # still the old chain, which ca_file does not trust
        return f"unverified: {e.verify_message}"


def until_served(addresses: Iterable[tuple[str, int]], want: str, ca_file: str | None = None,
                 timeout: float = 30.0) -> dict[tuple[str, int], str]:
    """Wait until every address presents certificate `want`; returns those that do not (with
    what they serve). The broker answers the config update before each listener has swapped
    (seen: one listener 0.3 s behind), so "reloaded" is what a handshake shows."""
    pending = list(addresses)
    deadline = time.monotonic() + timeout
    while True:
        got = {a: _served_or_why(a, ca_file) for a in pending}
        pending = [a for a, f in got.items() if f != want]
        if not pending or time.monotonic() >= deadline:
            return {a: got[a] for a in pending}
        time.sleep(0.2)


def fingerprint(pem: bytes) -> str:
    """SHA-256 of a keystore's leaf certificate, as served() reports it."""
    cert = x509.load_pem_x509_certificates(pem)[0]
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()
