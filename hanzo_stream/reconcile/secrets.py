"""Where SCRAM passwords come from: the environment or a secrets file, never the plan.

HANZO_STREAM_PASSWORD_<PRINCIPAL> (upper case, '-' -> '_') wins over the file. The file is
JSON: either {"principal": "password"} or the local platform's credentials.json shape
{"admin": ..., "principals": {...}}.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path


def env_name(principal: str) -> str:
    return "HANZO_STREAM_PASSWORD_" + principal.upper().replace("-", "_")


def load_passwords(principals: Iterable[str], secrets_file: Path | None = None,
                   env: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if env is None else env
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
