"""A real Prometheus (Debian's `prometheus` package) scraping the local platform.

It loads the project's rule files from monitoring/rules, so the alerts and the standard
names (recording rules) evaluated locally are the ones production loads (copies whose
runbook links open in a browser, as the stacks' PrometheusRule has them). Scrape and
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

from ..monitoring import RUNBOOK_BASE_ENV, RUNBOOK_BASE_URL, prom_api, rule_files, with_runbook_links
from .daemon import Daemon, StartFailed, managed
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


def linked_rules(rules: Sequence[Path], home: Path) -> list[Path]:
    """Copies of the rule files in `home` with each runbook link under the base URL
    (HANZO_STREAM_RUNBOOK_BASE_URL, else the repository's docs): a page's link must open."""
    base = os.environ.get(RUNBOOK_BASE_ENV) or RUNBOOK_BASE_URL
    out = home / "rules"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    copies = []
    for i, p in enumerate(rules):
        doc = yaml.safe_load(p.read_text()) or {}
        if isinstance(doc.get("groups"), list):
            doc["groups"] = with_runbook_links(doc["groups"], base)
        copy = out / f"{i:02d}-{p.name}"
        copy.write_text(f"# {p}, with runbook links under {base}\n" + yaml.safe_dump(doc, sort_keys=False))
        copies.append(copy)
    return copies


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
    rules = linked_rules(rule_files() if rules is None else rules, home)
    config.write_text(render_config(jobs, rules, scrape_interval, evaluation_interval, alertmanagers))
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


stop, status, url = managed(NAME)


# The HTTP API helpers work against any Prometheus; re-exported for callers of this module.
query, targets, alerts, rule_groups = prom_api.query, prom_api.targets, prom_api.alerts, prom_api.rule_groups
