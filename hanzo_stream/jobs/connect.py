"""Each job connects as its own registry principal, never as whoever ran the command.

The cluster address, protocol, mechanism and CA come from HANZO_STREAM_* as for every
command; the principal is the group's; its password is looked up in this order:
HANZO_STREAM_SASL_PASSWORD if HANZO_STREAM_SASL_USERNAME is that principal,
HANZO_STREAM_PASSWORD_<PRINCIPAL>, the JSON file HANZO_STREAM_SECRETS_FILE, and last the
local platform's credentials.json in the state directory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from ..core import state
from ..core.connection import Connection, ConnectionError_
from ..reconcile.secrets import env_name


def principal_password(principal: str, env: Mapping[str, str], home: Path | None = None) -> str:
    if env.get("HANZO_STREAM_SASL_USERNAME") == principal and env.get("HANZO_STREAM_SASL_PASSWORD"):
        return env["HANZO_STREAM_SASL_PASSWORD"]
    if env.get(env_name(principal)):
        return env[env_name(principal)]
    files = [env.get("HANZO_STREAM_SECRETS_FILE")]
    if home is not None:
        files.append(str(state.credentials_file(home)))
    for f in filter(None, files):
        if Path(f).exists():
            doc = json.loads(Path(f).read_text())
            found = doc.get("principals", doc).get(principal) if isinstance(doc, dict) else None
            if found:
                return found
    raise ConnectionError_(
        f"no password for principal {principal}: set {env_name(principal)}, or "
        "HANZO_STREAM_SECRETS_FILE to a JSON {principal: password} file; the local platform "
        "keeps them in $HANZO_STREAM_HOME/credentials.json")


def job_connection(principal: str, env: Mapping[str, str] | None = None,
                   home: Path | None = None) -> Connection:
    """The cluster from HANZO_STREAM_*, logged in as `principal`."""
    env = os.environ if env is None else env
    base = Connection.from_env(env)
    if not base.uses_sasl:
        return base
    return base.as_principal(principal, principal_password(principal, env, home))
