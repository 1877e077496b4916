"""Local SASL credentials: one generated password per registry principal, kept 0600.

In the cluster the same passwords are Pulumi secrets; locally they live only in
<state>/credentials.json and are handed to the reconciler through its secrets file.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Credentials:
    admin: str
    principals: dict[str, str] = field(default_factory=dict)

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


def _new_password() -> str:
    return secrets.token_urlsafe(24)


def load_or_create(path: Path, principals: list[str]) -> Credentials:
    """Load the credentials file, adding passwords for principals seen for the first time."""
    if path.exists():
        data = json.loads(path.read_text())
        creds = Credentials(data["admin"], data.get("principals", {}))
    else:
        creds = Credentials(_new_password())
    changed = not path.exists()
    for p in principals:
        if p not in creds.principals:
            creds.principals[p] = _new_password()
            changed = True
    if changed:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"admin": creds.admin, "principals": creds.principals}, f, indent=2)
    return creds
