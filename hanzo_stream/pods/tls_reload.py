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

import argparse
import datetime as dt
import hashlib
import logging
import signal
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from ..core.broker_config import CLIENT, INTERNAL
from ..core.secret_files import write_secret

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


def identity(cert_pem: bytes) -> str:
    """A certificate's subject and names, which Kafka will not change in place: a new one
    needs a restart, any other renewal is a reload."""
    cert = x509.load_pem_x509_certificates(cert_pem)[0]
    return " ".join([cert.subject.rfc4514_string(), *Keystore(cert, b"").sans])


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


# ------------------------------------------------------------------ the broker pod's sidecar

log = logging.getLogger("hanzo_stream.pods.tls_reload")


@dataclass
class Watched:
    """What the sidecar has had its broker serve and trust."""

    trusted: bytes  # the trust bundle the broker reads (its file at the sidecar's start)
    served: bytes | None = None  # the keystore the broker serves (its file, once written)
    refused: str = ""  # digest of the Secret's content last refused (said once)


def read_properties(path: Path) -> dict[str, str]:
    """The `key=value` lines the broker's entrypoint wrote (server.properties)."""
    out = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            out[key.strip()] = value
    return out


def step(tls_dir: Path, keystore: Path, properties: Path, node_id: int, admin: Any,
         seen: Watched, settle: float = TRUST_SETTLE_SECONDS,
         now: dt.datetime | None = None) -> str | None:
    """One look at the mounted Secret (kubelet swaps its files when the Secret changes: a
    renewal by cert-manager or `pulumi up`). What changed is reloaded in the safe order, a new
    trust bundle alone first; what cannot be is refused with the reason. A reload that fails
    (the broker restarting, a timeout) raises, and the next round does it again. Returns what
    it did."""
    if seen.served is None:
        try:
            seen.served = keystore.read_bytes()
        except FileNotFoundError:
            return None  # the broker's entrypoint has not written it yet
    new = (tls_dir / "tls.key").read_bytes() + (tls_dir / "tls.crt").read_bytes()
    trusted = (tls_dir / "ca.crt").read_bytes()
    if new == seen.served and trusted == seen.trusted:
        return None
    configs = reload_configs(read_properties(properties))
    try:
        if new != seen.served:
            check(seen.served, new, trusted, what=f"{tls_dir}/tls.crt", now=now)
        if trusted != seen.trusted:
            reload(admin, node_id, configs)
            seen.trusted = trusted
            if new == seen.served:
                return "reloaded the trust bundle"
            time.sleep(settle)
        install(keystore, new)
        reload(admin, node_id, configs)
        seen.served = new
    except Refused as e:  # checked again each round (a clock behind may catch up), said once
        digest = hashlib.sha256(new + b"\0" + trusted).hexdigest()
        if digest == seen.refused:
            return None
        seen.refused = digest
        return f"not reloaded: {e}"
    return f"reloaded: serving certificate sha256 {fingerprint(new)[:16]}"


def watch(tls_dir: Path, keystore: Path, properties: Path, node_id: int,
          connect: Callable[[], Any], every: float = 10.0, rounds: int | None = None,
          now: dt.datetime | None = None) -> None:
    """step() every `every` seconds. After a failure the admin client is made anew: on the
    real cluster one pod's reloads timed out three times in a row (30 s each) while its
    peers' went through at once."""
    seen = Watched((tls_dir / "ca.crt").read_bytes())
    admin, n = connect(), 0
    while rounds is None or n < rounds:
        try:
            if said := step(tls_dir, keystore, properties, node_id, admin, seen, now=now):
                log.info(said)
        except Exception as e:  # the broker may be restarting: say why, and look again
            log.warning("cannot reload yet (tried again in %s s): %s: %s", every,
                        type(e).__name__, e)
            admin = connect()
        n += 1
        _STOP.sleeping = True
        try:
            if _STOP.asked:
                return
            time.sleep(every)
        finally:
            _STOP.sleeping = False


@dataclass
class _Stop:
    """SIGTERM ends the watch only while it sleeps. Raised anywhere else (inside the admin
    client's C code on a loaded machine), SystemExit came out as another error, exit 1 (seen in
    CI); asked then, the round finishes and the watch returns before its next sleep."""
    asked: bool = False
    sleeping: bool = False


_STOP = _Stop()


def _stop(*_: object) -> None:
    _STOP.asked = True
    if _STOP.sleeping:
        raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    from confluent_kafka.admin import AdminClient

    from ..core.connection import Connection, pod_ordinal

    ap = argparse.ArgumentParser(prog="python -m hanzo_stream.pods.tls_reload",
                                 description="Serve a renewed broker certificate without a restart.")
    ap.add_argument("--tls-dir", type=Path, required=True, help="the mounted TLS Secret")
    ap.add_argument("--keystore", type=Path, required=True, help="the PEM file the broker reads")
    ap.add_argument("--properties", type=Path, required=True, help="the broker's server.properties")
    ap.add_argument("--broker", type=int,
                    help="this broker's node id (default: the pod's ordinal, from HOSTNAME)")
    ap.add_argument("--every", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, help="stop after this many rounds (default: never)")
    a = ap.parse_args(argv)
    # The container's PID 1: without a handler SIGTERM is ignored, and every broker stop waited
    # the pod's whole grace period for this container (seen on the real cluster).
    signal.signal(signal.SIGTERM, _stop)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s tls-reload %(message)s")
    broker = a.broker if a.broker is not None else pod_ordinal()
    conf = Connection.from_env().confluent()
    log.info("watching %s for broker %s, every %g s", a.tls_dir, broker, a.every)  # SIGTERM handled
    watch(a.tls_dir, a.keystore, a.properties, broker, lambda: AdminClient(conf), a.every, a.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
