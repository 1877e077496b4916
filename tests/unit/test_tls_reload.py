"""What tls_reload refuses before a broker sees a new keystore, and what it asks brokers for."""

from __future__ import annotations

import datetime as dt
import ipaddress
import stat

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from hanzo_stream import tls_reload
from hanzo_stream.broker_config import BrokerSettings, Node, broker_config

PEM = serialization.Encoding.PEM
NOW = dt.datetime(2026, 11, 27, 12, tzinfo=dt.UTC)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca(cn: str = "CA"):
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(NOW - dt.timedelta(days=1)).not_valid_after(NOW + dt.timedelta(days=90))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def _keystore(ca, cn="kafka", hosts=("localhost", "127.0.0.1"), days=(-1, 30), key=None) -> bytes:
    ca_key, ca_cert = ca
    key = key or ec.generate_private_key(ec.SECP256R1())
    sans = [x509.IPAddress(ipaddress.ip_address(h)) if h[0].isdigit() else x509.DNSName(h)
            for h in hosts]
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(NOW + dt.timedelta(days=days[0]))
            .not_valid_after(NOW + dt.timedelta(days=days[1]))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return (key.private_bytes(PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
            + cert.public_bytes(PEM) + ca_cert.public_bytes(PEM))


CA = _ca()
TRUST = CA[1].public_bytes(PEM)
CURRENT = _keystore(CA)


def test_a_renewal_with_the_same_names_from_a_trusted_ca_passes():
    new = _keystore(CA)
    got = tls_reload.check(CURRENT, new, TRUST, now=NOW)
    assert got.sans == ["127.0.0.1", "localhost"]
    assert tls_reload.fingerprint(new) != tls_reload.fingerprint(CURRENT)


@pytest.mark.parametrize(("new", "says"), [
    (b"-----BEGIN PRIVATE KEY-----\ntruncated", "not a PEM keystore"),
    (_keystore(CA, hosts=("localhost",)), "differ from the served"),
    (_keystore(CA, cn="other"), "differ from the served"),
    (_keystore(CA, days=(-60, -1)), "not now; reissue it"),
    (_keystore(CA, days=(1, 30)), "not now; reissue it"),
    (_keystore(_ca("CA 2")), "which the brokers do not trust yet"),
])
def test_what_a_broker_could_not_serve_is_refused_with_the_fix(new, says):
    with pytest.raises(tls_reload.Refused, match=says):
        tls_reload.check(CURRENT, new, TRUST, now=NOW)


def test_a_key_of_another_certificate_is_refused():
    other_key = ec.generate_private_key(ec.SECP256R1())
    good = _keystore(CA)
    wrong = other_key.private_bytes(PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()) + good[good.index(b"-----BEGIN CERT"):]
    with pytest.raises(tls_reload.Refused, match="does not belong to its first certificate"):
        tls_reload.check(CURRENT, wrong, TRUST, now=NOW)


def test_a_new_ca_passes_once_the_bundle_holds_it():
    ca2 = _ca("CA 2")
    bundle = TRUST + ca2[1].public_bytes(PEM)
    tls_reload.check(CURRENT, _keystore(ca2), bundle, now=NOW)


def test_install_replaces_the_file_whole_and_private(tmp_path):
    path = tmp_path / "broker-keystore.pem"
    path.write_bytes(CURRENT)
    new = _keystore(CA)
    tls_reload.install(path, new)
    assert path.read_bytes() == new
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["broker-keystore.pem"]  # no temp left


def test_the_reload_sends_each_listeners_unchanged_store_locations():
    cfg = broker_config(BrokerSettings(1, (Node(1, "kafka-0"),), "/data", "/run/tls/key.pem",
                                       "/run/tls/ca.pem"))
    assert tls_reload.reload_configs(cfg) == {
        "listener.name.client.ssl.keystore.location": "/run/tls/key.pem",
        "listener.name.client.ssl.truststore.location": "/run/tls/ca.pem",
        "listener.name.internal.ssl.keystore.location": "/run/tls/key.pem",
        "listener.name.internal.ssl.truststore.location": "/run/tls/ca.pem",
    }
    own = {**cfg, "listener.name.client.ssl.keystore.location": "/run/tls/client.pem"}
    assert tls_reload.reload_configs(own, ["CLIENT"])[
        "listener.name.client.ssl.keystore.location"] == "/run/tls/client.pem"
