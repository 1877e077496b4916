"""The consumer-lag exporter of the local platform, as a background process.

Production runs danielqsj/kafka_exporter (infra/monitoring.py). It cannot be built here
(the Go module proxy answers 403 for github.com/danielqsj/kafka_exporter), so the local
platform runs hanzo_stream.monitoring.lag_exporter, which serves kafka_exporter's metric
names over the same SASL_SSL + SCRAM-SHA-512 connection with the local CA. The
connection (password included) goes through the environment, never the command line.

Its principal needs DESCRIBE on the topics (metadata, list offsets) and on the groups
(list, describe, fetch offsets) it reports, and nothing more: `lag-exporter`
(hanzo_stream/registry/platform.py), here and in Kubernetes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..core.connection import ENV, Connection
from ..monitoring.lag_exporter import DEFAULT_PORT
from .daemon import Daemon, managed
from .kafka import free_ports

NAME = "kafka-exporter"


def start(home: Path, conn: Connection, port: int | None = None, timeout: float = 30.0) -> str:
    """Start (or keep) the exporter; returns its base URL (metrics at <url>/metrics).

    port: fixed port, else the one it had before, else a free one.
    """
    d = Daemon.load(home, NAME)
    if d.alive() and d.url:
        return d.url
    port = port or d.port or free_ports(1)[0]
    env = dict(os.environ)
    for var in ENV.values():
        env.pop(var, None)
    env |= conn.environ()
    d.port, d.url = port, f"http://127.0.0.1:{port}"
    d.spawn([sys.executable, "-m", "hanzo_stream.monitoring.lag_exporter",
             "--listen", f"127.0.0.1:{port}", "--tag", d.marker], env)
    d.wait_http(f"{d.url}/metrics", timeout)
    return d.url


stop, status, url = managed(NAME)

__all__ = ["DEFAULT_PORT", "start", "status", "stop", "url"]
