"""The dead-letter monitor of the local platform, as a background process.

It logs in as the registry's `dead-letter-monitor` principal (its password through the
environment, never the command line) and serves its counters for the local Prometheus;
what it does and why it is not a Spark job: hanzo_stream/monitoring/dead_letter_monitor.py.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..core.connection import ENV, Connection
from ..monitoring.dead_letter_monitor import GROUP
from .daemon import Daemon, managed
from .kafka import free_ports

NAME = GROUP


def start(home: Path, conn: Connection, registry: Path, port: int | None = None,
          timeout: float = 60.0) -> str:
    """Start (or keep) the monitor; returns its base URL (metrics at <url>/metrics)."""
    d = Daemon.load(home, NAME)
    if d.alive() and d.url:
        return d.url
    port = port or d.port or free_ports(1)[0]
    env = {k: v for k, v in os.environ.items() if k not in ENV.values()} | conn.environ()
    d.port, d.url = port, f"http://127.0.0.1:{port}"
    d.spawn([sys.executable, "-m", "hanzo_stream.monitoring.dead_letter_monitor",
             "--listen", f"127.0.0.1:{port}", "--registry", str(registry), "--tag", d.marker], env)
    d.wait_http(f"{d.url}/metrics", timeout)
    return d.url


stop, status, url = managed(NAME)
