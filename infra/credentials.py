"""SASL credentials: one generated password per registry principal, plus the admin.

Passwords are generated once by the program (infra/generated.py), so they exist only as
Pulumi secrets (encrypted in state) and as Kubernetes Secrets; every manifest that needs one
refers to a Secret key. Rotating a password is explicit: `pulumi up --replace <the URN of
its Password resource>` (docs/deploy.md, day two).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import pulumi

from hanzo_stream.core.broker_config import jaas_config, to_server_properties
from hanzo_stream.registry import Registry

from . import generated
from .broker import JAAS_KEY, JAAS_SECRET
from .topology import labels

ADMIN = "admin"
ADMIN_SECRET = "kafka-admin"
SASL_FLAGS_KEY = "sasl.flags"
RECONCILER_SECRET, RECONCILER_KEY = "hanzo-stream-credentials", "credentials.json"


def user_secret(principal: str) -> str:
    """Name of the Secret holding `principal`'s username and password."""
    return ADMIN_SECRET if principal == ADMIN else f"kafka-user-{principal}"


def mechanism(principal: str) -> str:
    """Registry principals use SCRAM (created by the reconciler); the admin uses PLAIN,
    because its SCRAM credential would not exist before the reconciler's first run."""
    return "PLAIN" if principal == ADMIN else "SCRAM-SHA-512"


@dataclass
class Credentials:
    admin: pulumi.Output
    principals: dict[str, pulumi.Output]

    def password(self, principal: str) -> pulumi.Output:
        return self.admin if principal == ADMIN else self.principals[principal]

    def all(self) -> dict[str, pulumi.Output]:
        return {ADMIN: self.admin, **self.principals}

    def digest(self) -> pulumi.Output:
        """A fingerprint of every password (16 hex of a sha256 over 32-character random
        passwords: it tells nothing about them), to re-run what must follow a change."""
        return pulumi.Output.all(**self.all()).apply(lambda pw: hashlib.sha256(
            json.dumps(pw, sort_keys=True).encode()).hexdigest()[:16])


def _password(name: str) -> pulumi.Output:
    pw = generated.Password(f"password-{name}", length=32)  # alphanumeric: JAAS has no escaping
    return pulumi.Output.secret(pw.result)


def generate(registry: Registry) -> Credentials:
    return Credentials(_password(ADMIN),
                       {name: _password(name) for name in sorted(registry.principal_names())})


def _java_jaas(principal: str, password: str) -> str:
    module = ("org.apache.kafka.common.security.plain.PlainLoginModule"
              if mechanism(principal) == "PLAIN"
              else "org.apache.kafka.common.security.scram.ScramLoginModule")
    return f'{module} required username="{principal}" password="{password}";'


def manifests(namespace: str, creds: Credentials) -> list[dict]:
    """Secrets: one per principal, the brokers' JAAS, and the reconciler's credentials file."""
    out = []
    for principal, pw in creds.all().items():
        out.append(_secret(namespace, user_secret(principal), {
            "username": principal,
            "password": pw,
            "mechanism": mechanism(principal),
            "sasl.jaas.config": pw.apply(lambda p, who=principal: _java_jaas(who, p)),
            # For tools that take a login only as flags (kingpin's `@file`, e.g. kafka_exporter):
            # flags in a mounted file stay out of the process's argv.
            SASL_FLAGS_KEY: pw.apply(lambda p, who=principal:
                                     f"--sasl.username={who}\n--sasl.password={p}\n"),
        }))
    every = pulumi.Output.all(creds.admin, pulumi.Output.all(**creds.principals))
    jaas = every.apply(lambda a: to_server_properties(jaas_config(a[0], a[1])))
    out.append(_secret(namespace, JAAS_SECRET, {JAAS_KEY: jaas}))
    creds_file = every.apply(lambda a: json.dumps({"admin": a[0], "principals": a[1]},
                                                  sort_keys=True))
    out.append(_secret(namespace, RECONCILER_SECRET, {RECONCILER_KEY: creds_file}))
    return out


def _secret(namespace: str, name: str, data: dict) -> dict:
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": name, "namespace": namespace, "labels": labels("credentials", name)},
        "stringData": pulumi.Output.secret(data),
    }


def password_env(name: str, principal: str, key: str = "password") -> dict:
    """An env var read from the principal's Secret (never a literal value)."""
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": user_secret(principal),
                                                         "key": key}}}
