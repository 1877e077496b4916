"""The secret scan finds a secret in every form a leak takes, and nothing that is not one."""

from __future__ import annotations

import base64
import json
import secrets

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.integration.secret_scan import found, password, private_key


def test_a_password_is_found_as_itself_base64_at_any_alignment_and_hex():
    pw = secrets.token_urlsafe(24)
    s = [password("pw", pw)]
    for prefix in ("", "u:", "us:", "user:"):  # every base64 alignment
        blob = (prefix + pw + "!tail").encode()
        assert found(b"Authorization: Basic " + base64.b64encode(blob), s) == ["pw"]
        assert found(base64.urlsafe_b64encode(blob), s) == ["pw"]
    assert found(json.dumps({"jaas": f'password="{pw}";'}).encode(), s) == ["pw"]
    assert found(b"\x00\x01" + pw.encode() + b"\xff", s) == ["pw"]
    assert found(pw.encode().hex().encode(), s) == ["pw"]
    assert found(secrets.token_urlsafe(24).encode(), s) == []
    assert found(pw[:-1].encode(), s) == []  # all of it, not a prefix


def test_a_private_key_is_found_by_any_pem_line_or_its_der():
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    der = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    s = [private_key("key", pem)]
    assert found(pem.encode(), s) == ["key"]
    assert found(b"log: " + pem.splitlines()[2].encode(), s) == ["key"]
    assert found(b"\x00" + der + b"\x00", s) == ["key"]
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    assert found(public, s) == []
