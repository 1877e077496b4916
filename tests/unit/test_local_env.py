"""`hanzo-stream local env` hands over the password file, not the passwords."""

from __future__ import annotations

import json
import os
from pathlib import Path

from typer.testing import CliRunner

from hanzo_stream.cli import app
from hanzo_stream.local import credentials
from hanzo_stream.reconcile.secrets import load_passwords
from tests.integration.conftest import exports

ROOT = Path(__file__).resolve().parents[2]


def _state(tmp_path: Path, registry) -> credentials.Credentials:
    creds = credentials.of_home(tmp_path, registry.principal_names())
    (tmp_path / "kafka").mkdir()
    (tmp_path / "kafka" / "cluster.json").write_text(json.dumps({
        "home": str(tmp_path / "kafka"), "cluster_id": "x", "ca_file": str(tmp_path / "tls" / "ca.pem"),
        "nodes": [{"node_id": 1, "host": "127.0.0.1", "client_port": 19093, "internal_port": 19094,
                   "controller_port": 19095, "pid": None}], "jmx_ports": [19096]}))
    return creds


def test_local_env_names_the_0600_file_and_prints_only_the_admins_password(tmp_path, registry):
    creds = _state(tmp_path, registry)
    res = CliRunner().invoke(app, ["local", "env", "-r", str(ROOT / "topics.yaml")],
                             env={"HANZO_STREAM_HOME": str(tmp_path)})
    assert res.exit_code == 0, res.output
    exported = exports(res.stdout)
    assert exported["HANZO_STREAM_SECRETS_FILE"] == str(tmp_path / "credentials.json")
    assert exported["HANZO_STREAM_SASL_PASSWORD"] == creds.admin
    assert not [p for p, pw in creds.principals.items() if pw in res.stdout]
    assert os.stat(exported["HANZO_STREAM_SECRETS_FILE"]).st_mode & 0o777 == 0o600
    # what apply then finds, with nothing else set:
    assert load_passwords(registry.principal_names(), env=exported) == creds.principals


def test_local_env_as_a_service_prints_its_password_only_and_unsets_the_file(tmp_path, registry):
    creds = _state(tmp_path, registry)
    res = CliRunner().invoke(app, ["local", "env", "--principal", "llm-gateway",
                                   "-r", str(ROOT / "topics.yaml")],
                             env={"HANZO_STREAM_HOME": str(tmp_path)})
    assert res.exit_code == 0, res.output
    assert "unset HANZO_STREAM_SECRETS_FILE" in res.stdout
    assert creds.admin not in res.stdout
    assert [p for p, pw in creds.principals.items() if pw in res.stdout] == ["llm-gateway"]


def test_passwords_come_from_the_environment_or_a_file_and_the_environment_wins(tmp_path):
    f = tmp_path / "secrets.json"
    f.write_text(json.dumps({"a": "from-file", "b": "from-file"}))
    env = {"HANZO_STREAM_PASSWORD_A": "from-env", "HANZO_STREAM_SECRETS_FILE": str(f)}
    assert load_passwords(["a", "b", "c"], env=env) == {"a": "from-env", "b": "from-file"}
    assert load_passwords(["a", "b"], env={}) == {}
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"principals": {"b": "from-flag"}}))
    assert load_passwords(["b"], other, env=env) == {"b": "from-flag"}  # --secrets-file first
