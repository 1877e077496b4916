"""Why a client cannot use the cluster: one specific answer per cause, never "timed out".

The client libraries cannot always say why. librdkafka reports an untrusted CA and a
certificate for another host alike ("certificate verify failed"), and a missing SASL layer
or plaintext sent to a TLS listener only as a dropped connection; kafka-python-ng drops the
TLS error entirely and reports every one of these as "no brokers available". `diagnose()`
walks the layers itself against the first bootstrap address, each with its own check:

  TCP connect -> TLS handshake (Python's ssl, the same CA and hostname rules) -> SASL
  handshake (one Kafka request: does the listener want SASL, which mechanisms) -> login
  (librdkafka, which reports a refused login as _AUTHENTICATION)

and returns the first layer that fails, with what to change. It never sends a password
anywhere but the SASL login, and never prints one.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from dataclasses import dataclass

from .connection import ENV, Connection

# Kafka protocol: SaslHandshake (api key 17) v1, and the error codes it answers with.
SASL_HANDSHAKE, SASL_HANDSHAKE_V1 = 17, 1
UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE = 33, 34
# OpenSSL verify results that mean "trusted, but issued for another name".
NAME_MISMATCH_CODES = {62, 64}  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH


@dataclass(frozen=True)
class Problem:
    kind: str  # one of KINDS
    message: str  # what is wrong and what to change

    def __str__(self) -> str:
        return self.message


KINDS = ("unreachable", "tls_required", "not_tls", "untrusted_certificate", "hostname_mismatch",
         "sasl_required", "sasl_not_enabled", "mechanism_disabled", "authentication_failed",
         "no_answer")


def diagnose(conn: Connection, timeout: float = 10.0) -> Problem | None:
    """The first thing that stops `conn` from working, or None if it logs in fine."""
    host, port = _first_address(conn.bootstrap)
    where = f"{host}:{port}"
    try:
        raw = socket.create_connection((host, port), timeout=timeout)
    except OSError as e:
        return Problem("unreachable", f"nothing answers at {where} ({e.strerror or e}); "
                                      f"check {ENV['bootstrap']}")
    with raw:
        if conn.uses_tls:
            sock, problem = _tls(raw, conn, host, port, timeout)
            if problem:
                return problem
        else:
            sock = raw
        try:
            answer = _sasl_handshake(sock, conn.sasl_mechanism if conn.uses_sasl else "PLAIN")
        except (OSError, ValueError, struct.error):  # not a Kafka answer
            answer = None
        if answer is None:
            if not conn.uses_tls and _speaks_tls(host, port, timeout):
                return Problem("tls_required", (
                    f"{where} speaks TLS but the client uses {conn.security_protocol}: set "
                    f"{ENV['security_protocol']}=SASL_SSL and {ENV['ca_file']} to the cluster's CA"))
            return Problem("no_answer", f"{where} did not answer a Kafka request; is it a Kafka "
                                        f"listener? (client uses {conn.security_protocol})")
    error, mechanisms = answer
    enabled = ", ".join(mechanisms) or "none"
    if not conn.uses_sasl:
        if error != ILLEGAL_SASL_STATE:
            return Problem("sasl_required", (
                f"{where} requires SASL ({enabled}) but the client uses "
                f"{conn.security_protocol}: set {ENV['security_protocol']}=SASL_SSL, "
                f"{ENV['username']} and {ENV['password']}"))
        return None
    if error == ILLEGAL_SASL_STATE:
        return Problem("sasl_not_enabled", f"{where} does not use SASL; the client uses "
                                           f"{conn.security_protocol}")
    if error == UNSUPPORTED_SASL_MECHANISM:
        return Problem("mechanism_disabled", (
            f"{where} does not enable {conn.sasl_mechanism} (enabled: {enabled}): set "
            f"{ENV['sasl_mechanism']}"))
    return _login(conn, where, timeout)


def _first_address(bootstrap: str) -> tuple[str, int]:
    first = bootstrap.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    return host.strip("[]"), int(port)


def _tls(raw: socket.socket, conn: Connection, host: str, port: int,
         timeout: float) -> tuple[ssl.SSLSocket | None, Problem | None]:
    where = f"{host}:{port}"
    ctx = ssl.create_default_context(cafile=conn.ca_file or None)
    try:
        return ctx.wrap_socket(raw, server_hostname=host), None
    except ssl.SSLCertVerificationError as e:
        cert = _peer_certificate(host, port, timeout)
        if e.verify_code in NAME_MISMATCH_CODES:
            names = ", ".join(cert["names"]) or "no name"
            return None, Problem("hostname_mismatch", (
                f"the certificate at {where} is for {names}, not {host}: connect by a name it "
                f"carries ({ENV['bootstrap']}), or reissue it with {host} in its subjectAltName"))
        trusted = conn.ca_file or "the system's CA store"
        return None, Problem("untrusted_certificate", (
            f"the certificate at {where} is issued by {cert['issuer']!r}, which the client does "
            f"not trust ({trusted}; {e.verify_message}): set {ENV['ca_file']} to the cluster's CA"))
    except (ssl.SSLError, OSError) as e:
        return None, Problem("not_tls", (
            f"{where} does not speak TLS ({e}) but the client uses {conn.security_protocol}: "
            f"check {ENV['security_protocol']} and the port"))


def _unverified(host: str, port: int, timeout: float) -> ssl.SSLSocket:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # only to read what the broker presents, never to talk
    return ctx.wrap_socket(socket.create_connection((host, port), timeout=timeout),
                           server_hostname=host)


def _speaks_tls(host: str, port: int, timeout: float) -> bool:
    try:
        with _unverified(host, port, timeout):
            return True
    except (ssl.SSLError, OSError):
        return False


def _peer_certificate(host: str, port: int, timeout: float) -> dict:
    """The names and issuer on the broker's certificate, read without trusting it."""
    from cryptography import x509

    try:
        with _unverified(host, port, timeout) as s:
            der = s.getpeercert(binary_form=True)
    except (ssl.SSLError, OSError):
        return {"names": [], "issuer": "unknown"}
    cert = x509.load_der_x509_certificate(der)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [str(n.value) for n in san]
    except x509.ExtensionNotFound:
        names = [a.value for a in cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)]
    return {"names": names, "issuer": cert.issuer.rfc4514_string()}


def _sasl_handshake(sock: socket.socket, mechanism: str) -> tuple[int, list[str]] | None:
    """SaslHandshake v1: (error code, enabled mechanisms), or None if no Kafka answer came."""
    client = b"hanzo-stream-diagnose"
    mech = mechanism.encode()
    body = (struct.pack(">hhih", SASL_HANDSHAKE, SASL_HANDSHAKE_V1, 1, len(client)) + client
            + struct.pack(">h", len(mech)) + mech)
    sock.sendall(struct.pack(">i", len(body)) + body)
    head = _read(sock, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">i", head)
    if not 10 <= size <= 1 << 16:
        return None  # not a Kafka frame (e.g. a TLS alert)
    payload = _read(sock, size)
    if payload is None:
        return None
    correlation, error, count = struct.unpack(">ihi", payload[:10])
    if correlation != 1:
        return None
    mechanisms, at = [], 10
    for _ in range(count):
        (n,) = struct.unpack(">h", payload[at:at + 2])
        mechanisms.append(payload[at + 2:at + 2 + n].decode())
        at += 2 + n
    return error, mechanisms


def _read(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _login(conn: Connection, where: str, timeout: float) -> Problem | None:
    """A real SASL login by librdkafka; it reports a refused login as _AUTHENTICATION."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[KafkaError] = []
    admin = AdminClient(conn.confluent() | {"error_cb": errors.append, "log_level": 0})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=0.25)
            return None
        except KafkaException:
            admin.poll(0)  # serves error_cb
        if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            return Problem("authentication_failed", (
                f"{where} refused the {conn.sasl_mechanism} login of {conn.username!r}: wrong "
                f"password or unknown user (Kafka does not say which, on purpose); check "
                f"{ENV['username']} and {ENV['password']}"))
    last = errors[-1].str() if errors else "no error reported"
    return Problem("no_answer", f"no metadata from {where} within {timeout:.0f}s ({last})")
