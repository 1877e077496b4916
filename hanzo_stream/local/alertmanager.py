"""A real Alertmanager (Debian's prometheus-alertmanager) routing the local alerts to PagerDuty.

The configuration is hanzo_stream.monitoring.alertmanager's, the one production loads; the
routing key is written to <home>/pagerduty-routing-key (0600) and only that file's path is in
alertmanager.yml. Locally the PagerDuty URL is the local inbox (hanzo_stream.local.pager)
unless HANZO_STREAM_PAGERDUTY_URL names another (with a real key in
HANZO_STREAM_PAGERDUTY_ROUTING_KEY, pages reach a real PagerDuty service).
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

from ..core.secret_files import write_secret
from ..monitoring import alertmanager
from .daemon import Daemon, StartFailed, managed
from .kafka import free_ports

NAME = "alertmanager"
KEY_FILE = "pagerduty-routing-key"
URL_ENV = "HANZO_STREAM_PAGERDUTY_URL"
ROUTING_KEY_ENV = "HANZO_STREAM_PAGERDUTY_ROUTING_KEY"


def _binary() -> str:
    exe = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if exe is None:
        raise StartFailed("Alertmanager is not installed: run .ci/install-monitoring.sh "
                          "(apt-get install prometheus-alertmanager)")
    return exe


def start(home: Path, routing_key: str, pagerduty_url: str, port: int | None = None,
          group_wait: str = "10s", group_interval: str = "1m", repeat_interval: str = "1h",
          timeout: float = 60.0) -> str:
    """Start Alertmanager (or reload it with this configuration); returns its base URL."""
    d = Daemon.load(home, NAME)
    home.mkdir(parents=True, exist_ok=True)
    key_file = home / KEY_FILE
    write_secret(key_file, routing_key)
    config = home / "alertmanager.yml"
    config.write_text(alertmanager.render(str(key_file), pagerduty_url, group_wait=group_wait,
                                          group_interval=group_interval,
                                          repeat_interval=repeat_interval))
    if d.alive() and d.url and d.pid:
        os.kill(d.pid, signal.SIGHUP)  # re-read the configuration
        return d.url
    port = port or d.port or free_ports(1)[0]
    d.port, d.url = port, f"http://127.0.0.1:{port}"
    d.spawn([_binary(), f"--config.file={config}", f"--storage.path={home / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
             "--log.level=warn"])
    d.wait_http(f"{d.url}/-/ready", timeout)
    return d.url


stop, status, url = managed(NAME)
