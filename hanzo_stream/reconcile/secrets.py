"""Where SCRAM passwords come from: the environment or a secrets file, never the plan.

HANZO_STREAM_PASSWORD_<PRINCIPAL> (upper case, '-' -> '_') wins over the file. The file is
--secrets-file, else the one HANZO_STREAM_SECRETS_FILE names (what `hanzo-stream local env`
exports: the path of the local platform's 0600 credentials.json, so passwords are handed over
without being printed). It is JSON: either {"principal": "password"} or the credentials.json
shape {"admin": ..., "principals": {...}}.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

SECRETS_FILE_ENV = "HANZO_STREAM_SECRETS_FILE"


def env_name(principal: str) -> str:
    return "HANZO_STREAM_PASSWORD_" + principal.upper().replace("-", "_")


def load_passwords(principals: Iterable[str], secrets_file: Path | None = None,
                   env: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if env is None else env
    secrets_file = secrets_file or env.get(SECRETS_FILE_ENV) or None
    from_file: dict[str, str] = {}
    if secrets_file:
        doc = json.loads(Path(secrets_file).read_text())
        from_file = doc.get("principals", doc) if isinstance(doc, dict) else {}
    out = {}
    for p in principals:
        value = env.get(env_name(p)) or from_file.get(p)
        if value:
            out[p] = value
    return out
