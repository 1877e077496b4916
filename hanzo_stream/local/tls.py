"""A throwaway CA and the broker's certificates for the local cluster, as PEM files.

Clients verify the broker against this CA with hostname checking on, exactly as they
would in production; only the CA is disposable. Its key is never written: it signs the
certificates below once, then is gone, so nothing else can ever be issued from it.

- broker-keystore.pem: key + certificate for localhost/127.0.0.1 (the listeners clients use);
- wrong-name-keystore.pem: key + certificate from the same CA for WRONG_NAME only, served by
  the test broker's WRONGNAME listener so hostname verification meets a real mismatch.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ..core.secret_files import write_secret

# RFC 6761: .invalid never resolves, so no client can ever legitimately reach this name.
WRONG_NAME = "wrong-name.invalid"


@dataclass(frozen=True)
class TlsFiles:
    ca_pem: Path  # trust this
    keystore_pem: Path  # broker key (PKCS#8) + certificate chain
    wrong_name_keystore_pem: Path  # the same for WRONG_NAME (absent in state from older versions)

    def private_key_files(self) -> tuple[Path, ...]:
        return tuple(p for p in (self.keystore_pem, self.wrong_name_keystore_pem) if p.exists())


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Hanzo Stream local"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def tls_files(directory: Path) -> TlsFiles:
    return TlsFiles(directory / "ca.pem", directory / "broker-keystore.pem",
                    directory / "wrong-name-keystore.pem")


def make_tls(directory: Path, hosts: tuple[str, ...] = ("localhost", "127.0.0.1")) -> TlsFiles:
    """Create (once) a CA, a broker certificate valid for `hosts` and one for WRONG_NAME."""
    directory.mkdir(parents=True, exist_ok=True)
    files = tls_files(directory)
    if files.ca_pem.exists() and files.keystore_pem.exists():
        return files
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder().subject_name(_name("Hanzo Stream local CA"))
        .issuer_name(_name("Hanzo Stream local CA")).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=825))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    for path, names in ((files.keystore_pem, hosts), (files.wrong_name_keystore_pem, (WRONG_NAME,))):
        key = ec.generate_private_key(ec.SECP256R1())
        sans: list[x509.GeneralName] = []
        for h in names:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(h)))
            except ValueError:
                sans.append(x509.DNSName(h))
        cert = (
            x509.CertificateBuilder().subject_name(_name("kafka")).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=397))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        write_secret(path, key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption())
                     + cert.public_bytes(pem) + ca_cert.public_bytes(pem))
    files.ca_pem.write_bytes(ca_cert.public_bytes(pem))
    return files
