"""The local PagerDuty: an Events API v2 endpoint whose pages land in <home>/pages.jsonl.

This machine reaches no PagerDuty; Alertmanager's PagerDuty receiver posts here instead, so
`local up` shows a dead letter becoming a page (hanzo_stream.monitoring.pager_inbox: checks
the routing key, keeps each event without it).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..monitoring import pager_inbox
from .daemon import Daemon, managed
from .kafka import free_ports

NAME = "pager"
PAGES = "pages.jsonl"


def start(home: Path, routing_key: str, port: int | None = None, timeout: float = 30.0) -> str:
    """Start (or keep) the endpoint; returns the URL to post events to."""
    d = Daemon.load(home, NAME)
    if not (d.alive() and d.url):
        port = port or d.port or free_ports(1)[0]
        d.port, d.url = port, f"http://127.0.0.1:{port}{pager_inbox.PATH}"
        env = dict(os.environ) | {pager_inbox.ROUTING_KEY_ENV: routing_key}
        d.spawn([sys.executable, "-m", "hanzo_stream.monitoring.pager_inbox",
                 "--listen", f"127.0.0.1:{port}", "--out", str(home / PAGES)], env)
        d.wait_http(f"http://127.0.0.1:{port}/", timeout)
    return str(d.url)


def pages(home: Path) -> list[dict]:
    """Every event received (routing key removed), oldest first."""
    return pager_inbox.read(home / PAGES)


stop, status, url = managed(NAME)
