"""The program's own dynamic providers (infra/generated.py): values made once at create,
kept by every later diff, the broker certificate re-issued only when it must be; and the
provider process can load them (dill, by reference to the module)."""

from __future__ import annotations

import base64
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from pulumi.dynamic.dynamic import serialize_provider

from infra import generated as g
from infra.tls import CA_VALIDITY_HOURS, CERT_VALIDITY_HOURS, RENEW_BEFORE_HOURS

from .infra_helpers import ROOT

NAMES = ["*.kafka-headless.hanzo.svc.cluster.local", "kafka.hanzo.svc.cluster.local"]
PROVIDERS = [g.PasswordProvider, g.RecordProvider,
             g.CertificateAuthorityProvider, g.BrokerCertificateProvider]


@pytest.fixture(scope="module")
def ca() -> dict:
    return g.CertificateAuthorityProvider().create(
        {"common_name": "Hanzo Stream Kafka CA", "organization": "Hanzo",
         "validity_hours": float(CA_VALIDITY_HOURS)}).outs  # numbers cross the engine as floats


def broker_inputs(ca: dict, names: list[str] = NAMES) -> dict:
    return {"ca_cert_pem": ca["cert_pem"], "ca_private_key_pem": ca["private_key_pem"],
            "common_name": "kafka.hanzo.svc", "organization": "Hanzo", "dns_names": names,
            "validity_hours": float(CERT_VALIDITY_HOURS),
            "renew_before_hours": float(RENEW_BEFORE_HOURS)}


@pytest.fixture(scope="module")
def issued(ca) -> dict:
    return g.BrokerCertificateProvider().create(broker_inputs(ca)).outs


def test_providers_pickle_by_reference_and_load_where_the_provider_process_runs():
    """The engine's provider process (`python -m pulumi.dynamic`) unpickles each provider;
    with the repository root on PYTHONPATH it finds them by module and class name."""
    blobs = {cls.__name__: serialize_provider(cls()) for cls in PROVIDERS}
    for name, blob in blobs.items():
        raw = base64.b64decode(blob)
        assert b"infra.generated" in raw and name.encode() in raw and len(raw) < 200
    code = ("import base64, sys, dill\n"
            "for blob in sys.argv[1:]:\n"
            "    p = dill.loads(base64.b64decode(blob))\n"
            "    print(type(p).__module__, type(p).__name__)\n"
            "heavy = ('cryptography', 'hanzo_stream', 'infra.program')\n"
            "print(sorted(m for m in heavy if m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", code, *blobs.values()], cwd="/",
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:-1] == [f"infra.generated {n}" for n in blobs]
    assert lines[-1] == "[]"  # loading them imports nothing heavy and nothing of the program


def test_password_is_alphanumeric_and_never_changes_by_itself():
    p = g.PasswordProvider()
    made = p.create({"length": 32.0}).outs
    assert len(made["result"]) == 32 and made["result"].isalnum()
    assert made["result"] != p.create({"length": 32.0}).outs["result"]
    assert p.diff("id", made, {"length": 40.0}).changes is False  # rotation is --replace only


def test_record_keeps_the_first_value():
    p = g.RecordProvider()
    made = p.create({"value": 1.0}).outs
    assert made["result"] == 1.0
    assert p.diff("id", made, {"value": 3.0}).changes is False


def test_ca_is_a_self_signed_p256_ca_for_ten_years_never_reissued(ca):
    cert = x509.load_pem_x509_certificate(ca["cert_pem"].encode())
    cert.verify_directly_issued_by(cert)
    assert cert.subject.rfc4514_string() == "O=Hanzo,CN=Hanzo Stream Kafka CA"
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign and usage.digital_signature
    life = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert life == timedelta(hours=CA_VALIDITY_HOURS)
    assert ca["private_key_pem"].startswith("-----BEGIN PRIVATE KEY-----")
    assert g.CertificateAuthorityProvider().diff("id", ca, {"validity_hours": 1.0}).changes is False


def test_broker_certificate_is_signed_for_every_name_with_a_pkcs8_key(ca, issued):
    cert = x509.load_pem_x509_certificate(issued["cert_pem"].encode())
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca["cert_pem"].encode()))
    assert cert.subject.rfc4514_string() == "O=Hanzo,CN=kafka.hanzo.svc"
    ext = cert.extensions
    assert ext.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName) == NAMES
    assert [u._name for u in ext.get_extension_for_class(x509.ExtendedKeyUsage).value] == [
        "serverAuth", "clientAuth"]
    usage = ext.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature and usage.key_encipherment and not usage.key_cert_sign
    assert not ext.get_extension_for_class(x509.BasicConstraints).value.ca
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == timedelta(hours=CERT_VALIDITY_HOURS)
    assert issued["not_after"] == cert.not_valid_after_utc.isoformat()
    key = load_pem_private_key(issued["private_key_pem"].encode(), None)
    assert issued["private_key_pem"].startswith("-----BEGIN PRIVATE KEY-----")  # Kafka reads PKCS#8
    assert key.public_key() == cert.public_key()
    assert "ca_private_key_pem" not in issued  # the CA key stays in the CA's state


def test_broker_certificate_is_reissued_only_when_it_must_be(ca, issued):
    p = g.BrokerCertificateProvider()
    same = broker_inputs(ca)
    assert p.diff("id", issued, {**same, "__provider": "a new serialization"}).changes is False
    assert p.diff("id", issued, {**same, "validity_hours": 1.0}).changes is False  # next issue only
    grown = p.diff("id", issued, broker_inputs(ca, [*NAMES, "kafka.example.com"]))
    assert (grown.changes, grown.replaces) == (True, ["dns_names"])
    new_ca = p.diff("id", issued, {**same, "ca_cert_pem": "another CA"})
    assert new_ca.replaces == ["ca_cert_pem"]
    soon = (datetime.now(UTC) + timedelta(days=29)).isoformat()
    due = p.diff("id", {**issued, "not_after": soon}, same)
    assert (due.changes, due.replaces) == (True, ["not_after"])


def test_renewal_window_is_thirty_days_before_expiry():
    expiry = datetime(2030, 1, 31, tzinfo=UTC)
    window = timedelta(hours=RENEW_BEFORE_HOURS)
    assert not g.renewal_due(expiry.isoformat(), RENEW_BEFORE_HOURS, expiry - window - timedelta(seconds=1))
    assert g.renewal_due(expiry.isoformat(), RENEW_BEFORE_HOURS, expiry - window)
    assert g.renewal_due(None, RENEW_BEFORE_HOURS)  # an expiry nobody knows: issue a new one
