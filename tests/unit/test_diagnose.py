"""plan/apply say why they cannot read a cluster (the cases themselves run against the real
broker in tests/integration/test_authentication.py)."""

from __future__ import annotations

import socket
from pathlib import Path

from typer.testing import CliRunner

from hanzo_stream import cli
from hanzo_stream.core.connection import Connection
from hanzo_stream.core.diagnose import diagnose

ROOT = Path(__file__).resolve().parents[2]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_nothing_listening_is_unreachable():
    problem = diagnose(Connection(f"127.0.0.1:{closed_port()}"), timeout=5)
    assert problem is not None and problem.kind == "unreachable"
    assert "HANZO_STREAM_BOOTSTRAP" in problem.message


def test_plan_prints_the_cause_when_it_cannot_read_the_cluster(monkeypatch):
    import hanzo_stream.reconcile as reconcile

    def unreadable(admin):
        raise RuntimeError("KafkaError{code=_TRANSPORT}")

    monkeypatch.setattr(reconcile, "observe", unreadable)
    res = CliRunner().invoke(cli.app, ["plan", "-r", str(ROOT / "topics.yaml")],
                             env={"HANZO_STREAM_BOOTSTRAP": f"127.0.0.1:{closed_port()}",
                                  "HANZO_STREAM_SASL_USERNAME": "u", "HANZO_STREAM_SASL_PASSWORD": "p"})
    assert res.exit_code == 1
    assert "cannot read the cluster" in res.output and "nothing answers at" in res.output
