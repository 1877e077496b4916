"""The local cluster's certificates and kubeconfigs: one CA, a certificate per identity.

What kubeadm would write to /etc/kubernetes/pki, made with `cryptography` into the node's
own directory: the API server's serving certificate, a client certificate for each
component (its user and group are what RBAC authorises), the kubelet's serving
certificate, and the service-account signing key. Keys are ECDSA P-256, readable by the
owner only; the CA lives for the life of the node directory.
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

YEAR = dt.timedelta(days=365)


@dataclass(frozen=True)
class Identity:
    """A client of the API server: file stem, user (CN) and groups (O)."""

    stem: str
    user: str
    groups: tuple[str, ...] = ()


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    return x509.Name([*(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _load(d: Path, stem: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate((d / f"{stem}.crt").read_bytes())
    key = serialization.load_pem_private_key((d / f"{stem}.key").read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return cert, key


def ensure_ca(d: Path) -> None:
    if (d / "ca.crt").exists():
        return
    d.mkdir(parents=True, exist_ok=True)
    key = _key()
    now = dt.datetime.now(dt.UTC)
    name = _name("hanzo-stream local kubernetes CA")
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + 10 * YEAR)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    _write_key(d / "ca.key", key)
    (d / "ca.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def issue(d: Path, stem: str, cn: str, orgs: tuple[str, ...] = (), dns: tuple[str, ...] = (),
          ips: tuple[str, ...] = (), server: bool = False) -> None:
    """<stem>.crt/.key signed by the CA; kept if already there."""
    if (d / f"{stem}.crt").exists():
        return
    ca, ca_key = _load(d, "ca")
    key = _key()
    now = dt.datetime.now(dt.UTC)
    usage = [ExtendedKeyUsageOID.SERVER_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]
    b = (x509.CertificateBuilder().subject_name(_name(cn, orgs)).issuer_name(ca.subject)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + 5 * YEAR)
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
         .add_extension(x509.ExtendedKeyUsage(usage), critical=False))
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    _write_key(d / f"{stem}.key", key)
    (d / f"{stem}.crt").write_bytes(b.sign(ca_key, hashes.SHA256()).public_bytes(
        serialization.Encoding.PEM))


def ensure_signing_key(d: Path) -> None:
    """The service-account token signing key pair (ES256)."""
    if (d / "sa.key").exists():
        return
    key = _key()
    _write_key(d / "sa.key", key)
    (d / "sa.pub").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def kubeconfig(d: Path, ident: Identity, server: str, path: Path | None = None) -> Path:
    """A kubeconfig that logs in as `ident` with its client certificate (files by path)."""
    out = path or d / f"{ident.stem}.kubeconfig"
    out.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: hanzo-local
  cluster:
    server: {server}
    certificate-authority: {d / 'ca.crt'}
contexts:
- name: hanzo-local
  context:
    cluster: hanzo-local
    user: {ident.user}
current-context: hanzo-local
users:
- name: {ident.user}
  user:
    client-certificate: {d / f'{ident.stem}.crt'}
    client-key: {d / f'{ident.stem}.key'}
""")
    out.chmod(0o600)
    return out
