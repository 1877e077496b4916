"""`hanzo-stream kafka TOOL`: the command line it gives Kafka's tool, and the login file.
Run for real by the runbooks' blocks (tests/integration/test_monitoring_live.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hanzo_stream.artifacts import kafka_tools
from hanzo_stream.core.connection import Connection

CONN = Connection("127.0.0.1:9093", username="admin", password="s3cret", ca_file="/ca.pem")


def line(tool: str, *args: str) -> list[str]:
    return kafka_tools.command(tool, args, CONN, Path("/d/c.properties"), Path("/d/log4j2"), "cp/*")


def test_a_tool_gets_the_shells_bootstrap_and_login_file_before_its_own_arguments():
    cmd = line("consumer-groups", "--describe", "--group", "billing-agg")
    i = cmd.index("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand")
    assert cmd[i + 1:] == ["--bootstrap-server", "127.0.0.1:9093", "--command-config",
                           "/d/c.properties", "--describe", "--group", "billing-agg"]
    assert "s3cret" not in " ".join(cmd)  # the password only in the file


@pytest.mark.parametrize("given", [["--bootstrap-server", "other:9093"], ["--bootstrap-server=other:9093"],
                                   ["--bootstrap-controller", "c:9095"]])
def test_the_callers_own_bootstrap_wins(given):
    cmd = line("metadata-quorum", *given, "describe", "--status")
    assert cmd.count("--bootstrap-server") == given.count("--bootstrap-server")
    assert "127.0.0.1:9093" not in cmd and cmd[-2:] == ["describe", "--status"]


def test_the_callers_own_login_file_wins():
    cmd = line("topics", "--command-config", "mine.properties", "--list")
    assert cmd.count("--command-config") == 1 and "/d/c.properties" not in cmd


@pytest.mark.parametrize("name", ["consumer-groups", "kafka-consumer-groups", "kafka-consumer-groups.sh"])
def test_a_tool_is_named_as_its_script_with_or_without_kafka_and_sh(name):
    assert kafka_tools.main_class(name) == kafka_tools.SCRIPTS["kafka-consumer-groups.sh"]


@pytest.mark.parametrize("name", ["storage", "server-start", "dump-log", "nope", ""])
def test_what_is_not_a_client_tool_is_refused_with_the_list(name):
    with pytest.raises(kafka_tools.UnknownTool, match="use one of acls, .*topics"):
        kafka_tools.main_class(name)


def test_the_login_file_is_the_java_clients_login_without_its_bootstrap():
    props = dict(ln.split("=", 1) for ln in kafka_tools.client_properties(CONN).splitlines() if ln)
    assert props == {k: v for k, v in CONN.java().items() if k != "bootstrap.servers"}
    assert 'password="s3cret"' in props["sasl.jaas.config"]


def test_the_cli_writes_client_properties_0600(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from hanzo_stream.cli import app

    for k, v in CONN.environ().items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "client.properties"
    res = CliRunner().invoke(app, ["client-properties", str(out)])
    assert res.exit_code == 0, res.output
    assert out.stat().st_mode & 0o777 == 0o600
    assert out.read_text() == kafka_tools.client_properties(CONN)
    assert "s3cret" not in res.output


def test_a_tools_own_help_needs_no_login():
    """`hanzo-stream kafka consumer-groups --help` on a laptop with no cluster set: Kafka's own
    help, from the platform's jars (a JVM, for real)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("HANZO_STREAM_")}
    res = subprocess.run([sys.executable, "-m", "hanzo_stream", "kafka", "consumer-groups", "--help"],
                         env=env, capture_output=True, text=True, timeout=120)
    said = res.stdout + res.stderr  # (its exit code is the tool's: 1 for some of Kafka's)
    assert "no cluster configured" not in said
    assert "--bootstrap-server" in said and "--describe" in said and "--reset-offsets" in said
