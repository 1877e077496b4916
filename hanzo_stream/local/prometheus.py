"""A real Prometheus (Debian's `prometheus` package) scraping the local platform.

It loads the project's rule files from monitoring/rules, so the alerts and the standard
names (recording rules) evaluated locally are the ones production loads. Scrape and
evaluation intervals are short by default so a fresh `local up` shows data within
seconds; tests shorten them further.
"""

from __future__ import annotations

import os
import shutil
import signal
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..monitoring import prom_api, rule_files
from .daemon import Daemon, Managed, StartFailed
from .kafka import free_ports

NAME = "prometheus"
BROKER_JOB = "kafka-broker"  # the JMX agent on each broker
EXPORTER_JOB = "kafka-exporter"  # consumer lag


@dataclass(frozen=True)
class ScrapeJob:
    name: str
    targets: tuple[str, ...]  # host:port
    file_sd: str | None = None  # a glob of Prometheus file_sd target files (jobs announce themselves)

    @staticmethod
    def from_urls(name: str, urls: Sequence[str]) -> ScrapeJob:
        return ScrapeJob(name, tuple(urllib.parse.urlparse(u).netloc or u for u in urls))


def platform_jobs(jmx_ports: Sequence[int], exporter_url: str | None,
                  extra: Sequence[ScrapeJob] = ()) -> list[ScrapeJob]:
    """The local platform's scrape jobs: every broker's JMX agent, the lag exporter, `extra`."""
    jobs = [ScrapeJob(BROKER_JOB, tuple(f"127.0.0.1:{p}" for p in jmx_ports))]
    if exporter_url:
        jobs.append(ScrapeJob.from_urls(EXPORTER_JOB, [exporter_url]))
    return jobs + list(extra)


def render_config(jobs: Sequence[ScrapeJob], rules: Sequence[Path], scrape_interval: str,
                  evaluation_interval: str, alertmanagers: Sequence[str] = ()) -> str:
    cfg = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": evaluation_interval,
                   "scrape_timeout": scrape_interval},
        "rule_files": [str(p) for p in rules],
        "scrape_configs": [_scrape_config(j) for j in jobs],
    }
    if alertmanagers:  # firing alerts go there (routing: hanzo_stream.monitoring.alertmanager)
        cfg["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [
            urllib.parse.urlparse(u).netloc or u for u in alertmanagers]}]}]}
    return "# Written by hanzo_stream.local.prometheus; regenerated on every start.\n" + yaml.safe_dump(
        cfg, sort_keys=False)


def _scrape_config(j: ScrapeJob) -> dict:
    if j.file_sd:
        return {"job_name": j.name, "file_sd_configs": [{"files": [j.file_sd], "refresh_interval": "5s"}]}
    return {"job_name": j.name, "static_configs": [{"targets": list(j.targets)}]}


def _binary() -> str:
    exe = shutil.which("prometheus")
    if exe is None:
        raise StartFailed("prometheus is not installed: run .ci/install-monitoring.sh "
                          "(apt-get install prometheus)")
    return exe


def start(home: Path, jobs: Sequence[ScrapeJob], rules: Sequence[Path] | None = None,
          scrape_interval: str = "5s", evaluation_interval: str = "5s", port: int | None = None,
          retention: str = "2d", timeout: float = 60.0, alertmanagers: Sequence[str] = ()) -> str:
    """Start Prometheus (or reload its configuration if it runs); returns its base URL."""
    d = Daemon.load(home, NAME)
    config = home / "prometheus.yml"
    home.mkdir(parents=True, exist_ok=True)
    config.write_text(render_config(jobs, rule_files() if rules is None else rules,
                                    scrape_interval, evaluation_interval, alertmanagers))
    if d.alive() and d.url:
        reload(home)
        return d.url
    port = port or d.port or free_ports(1)[0]
    d.port, d.url = port, f"http://127.0.0.1:{port}"
    d.spawn([_binary(), f"--config.file={config}", f"--storage.tsdb.path={home / 'data'}",
             f"--storage.tsdb.retention.time={retention}", f"--web.listen-address=127.0.0.1:{port}",
             "--web.enable-lifecycle", "--log.level=warn"])
    d.wait_http(f"{d.url}/-/ready", timeout)
    return d.url


def reload(home: Path) -> None:
    """Re-read prometheus.yml and the rule files (SIGHUP), as after editing a rule."""
    d = Daemon.load(home, NAME)
    if d.alive() and d.pid:
        os.kill(d.pid, signal.SIGHUP)


_managed = Managed(NAME)
stop, status, url = _managed.stop, _managed.status, _managed.url


# The HTTP API helpers work against any Prometheus; re-exported for callers of this module.
query, targets, alerts, rule_groups = prom_api.query, prom_api.targets, prom_api.alerts, prom_api.rule_groups
