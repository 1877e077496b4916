"""Local secrets: one generated password per registry principal, plus the services' keys, kept 0600.

In the cluster the same secrets are Pulumi secrets; locally they live only in
<state>/credentials.json: SASL passwords (handed to the reconciler through its secrets file),
the object store's access key pair and the PagerDuty routing key Alertmanager pages with.
A process gets a secret through its environment, its standard input or a 0600 file, never
its command line, a log line or a rendered configuration file.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..core.secret_files import write_secret
from ..core.state import (
    PAGERDUTY_ROUTING_KEY,
    POSTGRES_ADMIN_PASSWORD,
    POSTGRES_ROLE_PASSWORD,
    S3_ACCESS_KEY,
    S3_SECRET_KEY,
    credentials_file,
)

# Generated on first use. An access key id looks like AWS's (20 upper-case characters); a
# PagerDuty Events API v2 integration key is 32 hex characters.
SERVICE_SECRETS: dict[str, Callable[[], str]] = {
    S3_ACCESS_KEY: lambda: "HS" + secrets.token_hex(9).upper(),
    S3_SECRET_KEY: lambda: secrets.token_urlsafe(30),
    PAGERDUTY_ROUTING_KEY: lambda: secrets.token_hex(16),
    POSTGRES_ADMIN_PASSWORD: lambda: secrets.token_urlsafe(24),
    POSTGRES_ROLE_PASSWORD: lambda: secrets.token_urlsafe(24),
}


@dataclass
class Credentials:
    admin: str
    principals: dict[str, str] = field(default_factory=dict)
    services: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:  # never print a password (test failures print fixtures)
        return f"Credentials(admin=..., principals=[{', '.join(sorted(self.principals))}])"

    def password(self, principal: str) -> str:
        if principal == "admin":
            return self.admin
        try:
            return self.principals[principal]
        except KeyError:
            known = ", ".join(["admin", *sorted(self.principals)])
            raise KeyError(f"no local credentials for principal {principal!r}; known: {known}") from None

    def service(self, name: str) -> str:
        try:
            return self.services[name]
        except KeyError:
            raise KeyError(f"no local secret {name!r}; known: {', '.join(sorted(self.services))}") from None


def _new_password() -> str:
    return secrets.token_urlsafe(24)


def of_home(home: Path, principals: Iterable[str] = ()) -> Credentials:
    """The credentials of the platform whose state lives in `home` (state.credentials_file)."""
    return load_or_create(credentials_file(home), sorted(principals))


def load_or_create(path: Path, principals: list[str]) -> Credentials:
    """Load the credentials file, adding passwords for principals seen for the first time
    and any service secret it does not hold yet."""
    if path.is_symlink():
        raise RuntimeError(f"{path} is a symbolic link: the platform keeps its own 0600 file "
                           "there and reads no other; remove the link")
    if path.exists():
        data = json.loads(path.read_text())
        creds = Credentials(data["admin"], data.get("principals", {}), data.get("services", {}))
    else:
        creds = Credentials(_new_password())
    changed = not path.exists()
    for p in principals:
        if p not in creds.principals:
            creds.principals[p] = _new_password()
            changed = True
    for name, make in SERVICE_SECRETS.items():
        if name not in creds.services:
            creds.services[name] = make()
            changed = True
    if changed:
        write_secret(path, json.dumps({"admin": creds.admin, "principals": creds.principals,
                                       "services": creds.services}, indent=2))
    return creds
