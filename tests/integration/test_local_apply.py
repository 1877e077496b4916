"""A newcomer's first apply: `eval "$(hanzo-stream local env)"`, then `hanzo-stream apply`.

Against a broker fresh from `local up --only kafka` only the admin can log in: every
principal's SCRAM user is the reconciler's to create, and it needs their passwords. `local
env` names the local platform's 0600 credentials file (HANZO_STREAM_SECRETS_FILE) instead of
printing them; without it apply still refuses, as in production, where passwords come only
from HANZO_STREAM_PASSWORD_<NAME> or a secrets file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import ScramMechanism, UserScramCredentialDeletion

from hanzo_stream.registry import Registry

from .conftest import Cluster, apply_registry, exports, wait_until_logged_in

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hanzo_stream", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_apply_after_local_env_just_works(hip_cluster: Cluster, registry: Registry):
    if hip_cluster.home is None or hip_cluster.local is None:
        pytest.skip("`local env` describes the local platform; this cluster is external")
    principals = sorted(registry.principal_names())
    admin = hip_cluster.admin_client()
    base = {k: v for k, v in os.environ.items() if not k.startswith("HANZO_STREAM_")}
    base["HANZO_STREAM_HOME"] = str(hip_cluster.home)
    try:
        # The broker as `local up --only kafka` leaves it: no SCRAM user but the admin.
        for f in admin.alter_user_scram_credentials(
                [UserScramCredentialDeletion(p, ScramMechanism.SCRAM_SHA_512) for p in principals]
        ).values():
            f.result(timeout=30)
        env = cli(base, "local", "env")
        assert env.returncode == 0, env.stderr
        exported = exports(env.stdout)
        secrets_file = Path(exported["HANZO_STREAM_SECRETS_FILE"])
        assert secrets_file == hip_cluster.home / "credentials.json"
        assert secrets_file.stat().st_mode & 0o777 == 0o600
        assert not [p for p in principals if hip_cluster.creds.password(p) in env.stdout]

        # Without the file, as in production with no passwords given: refused, by name.
        bare = cli(base | {k: v for k, v in exported.items() if k != "HANZO_STREAM_SECRETS_FILE"},
                   "apply")
        assert bare.returncode == 1 and "no password for" in bare.stdout + bare.stderr

        first = cli(base | exported, "apply")
        output = first.stdout + first.stderr
        assert first.returncode == 0, output
        assert "no password for" not in output
        assert not [p for p in ["admin", *principals] if hip_cluster.creds.password(p) in output]
        wait_until_logged_in([hip_cluster.as_(p) for p in principals])  # with the file's passwords
        again = cli(base | exported, "plan")
        assert again.returncode == 0, again.stdout + again.stderr  # converged
    finally:
        apply_registry(hip_cluster, registry)  # whatever happened, leave the session as found
