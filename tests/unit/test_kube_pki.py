"""The local cluster's certificates: signed by its CA, with the names and groups RBAC reads."""

from __future__ import annotations

import ipaddress

import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from hanzo_stream.kube import pki


def _cert(d, stem):
    return x509.load_pem_x509_certificate((d / f"{stem}.crt").read_bytes())


def test_server_and_client_certificates_chain_to_the_ca(tmp_path):
    pki.ensure_ca(tmp_path)
    pki.issue(tmp_path, "apiserver", "kube-apiserver", server=True,
              dns=("kubernetes.default.svc",), ips=("10.123.0.2", "127.0.0.1"))
    pki.issue(tmp_path, "admin", "kubernetes-admin", ("system:masters",))
    ca = _cert(tmp_path, "ca")
    for stem in ("apiserver", "admin"):
        c = _cert(tmp_path, stem)
        ca.public_key().verify(c.signature, c.tbs_certificate_bytes, ec.ECDSA(c.signature_hash_algorithm))
        assert c.issuer == ca.subject
    san = _cert(tmp_path, "apiserver").extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["kubernetes.default.svc"]
    assert ipaddress.ip_address("127.0.0.1") in san.get_values_for_type(x509.IPAddress)
    admin = _cert(tmp_path, "admin")
    assert admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    eku = admin.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert oct((tmp_path / "admin.key").stat().st_mode & 0o777) == "0o600"


def test_issuing_again_keeps_what_exists(tmp_path):
    pki.ensure_ca(tmp_path)
    pki.issue(tmp_path, "admin", "kubernetes-admin")
    before = (tmp_path / "admin.crt").read_bytes(), (tmp_path / "ca.crt").read_bytes()
    pki.ensure_ca(tmp_path)
    pki.issue(tmp_path, "admin", "someone-else")
    assert ((tmp_path / "admin.crt").read_bytes(), (tmp_path / "ca.crt").read_bytes()) == before


def test_kubeconfig_points_at_the_files_by_path(tmp_path):
    pki.ensure_ca(tmp_path)
    ident = pki.Identity("scheduler", "system:kube-scheduler")
    pki.issue(tmp_path, ident.stem, ident.user)
    doc = yaml.safe_load(pki.kubeconfig(tmp_path, ident, "https://10.123.0.2:6443").read_text())
    assert doc["clusters"][0]["cluster"] == {"server": "https://10.123.0.2:6443",
                                             "certificate-authority": str(tmp_path / "ca.crt")}
    assert doc["users"][0]["user"]["client-key"] == str(tmp_path / "scheduler.key")
