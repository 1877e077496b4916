"""No password on a command line: /proc/<pid>/cmdline is readable by every user of the machine.

A fresh local cluster is formatted and started with every subprocess the platform spawns
recorded; its admin then logs in with the SCRAM credential that formatting stored (so the
argument file really carried it), and neither a recorded argv nor any process running on the
machine shows a password of this cluster.
"""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

import pytest

from hanzo_stream.local import credentials, kafka

pytestmark = pytest.mark.integration


def _live_cmdlines() -> list[bytes]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            with contextlib.suppress(OSError):  # gone meanwhile, or not ours to read
                out.append((p / "cmdline").read_bytes())
    return out


def test_formatting_and_starting_put_no_password_on_a_command_line(tmp_path, monkeypatch, registry):
    creds = credentials.of_home(tmp_path, registry.principal_names())
    argvs: list[list[str]] = []
    real_run = subprocess.run

    def run(args, *a, **kw):
        argvs.append([str(x) for x in args])
        return real_run(args, *a, **kw)

    class Popen(subprocess.Popen):
        def __init__(self, args, *a, **kw):
            argvs.append([str(x) for x in args])
            super().__init__(args, *a, **kw)

    monkeypatch.setattr(kafka.subprocess, "run", run)
    monkeypatch.setattr(kafka.subprocess, "Popen", Popen)
    cluster = kafka.start(tmp_path / "kafka", creds, brokers=1)
    try:
        monkeypatch.undo()
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(cluster.connection("admin", creds.admin, "SCRAM-SHA-512").confluent())
        assert admin.list_topics(timeout=30).brokers  # the SCRAM credential the format stored
        assert any("StorageTool" in a for argv in argvs for a in argv)  # formatting was recorded
        secrets = [creds.admin, *creds.principals.values()]
        shown = [s for s in secrets for argv in argvs if any(s in a for a in argv)]
        assert not shown, "a password on a spawned command line"
        live = [s for s in secrets for c in _live_cmdlines() if s.encode() in c]
        assert not live, "a password on a running process's command line"
        assert not list((tmp_path / "kafka").rglob("format.args"))  # the argument file is gone
    finally:
        kafka.stop(tmp_path / "kafka")
