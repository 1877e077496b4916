"""Local Prometheus configuration: what `local up` writes is a config promtool accepts."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from hanzo_stream.local import prometheus
from hanzo_stream.monitoring import rule_files


def test_platform_config_scrapes_brokers_and_exporter_and_loads_rules(tmp_path: Path) -> None:
    jobs = prometheus.platform_jobs([7071, 7072], "http://127.0.0.1:9308")
    text = prometheus.render_config(jobs, rule_files(), "2s", "1s")
    cfg = yaml.safe_load(text)
    targets = {c["job_name"]: c["static_configs"][0]["targets"] for c in cfg["scrape_configs"]}
    assert targets == {"kafka-broker": ["127.0.0.1:7071", "127.0.0.1:7072"],
                       "kafka-exporter": ["127.0.0.1:9308"]}
    assert cfg["global"]["evaluation_interval"] == "1s"
    assert len(cfg["rule_files"]) == len(rule_files())
    f = tmp_path / "prometheus.yml"
    f.write_text(text)
    exe = shutil.which("promtool")
    assert exe, "promtool missing: run .ci/install-monitoring.sh"
    res = subprocess.run([exe, "check", "config", str(f)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_scrape_job_from_url() -> None:
    assert prometheus.ScrapeJob.from_urls("x", ["http://127.0.0.1:9308"]).targets == ("127.0.0.1:9308",)


def test_jobs_announce_their_metrics_through_file_sd(tmp_path: Path) -> None:
    """llm-metrics listens on a free port and writes a file_sd target; promtool accepts the config."""
    from hanzo_stream.jobs.consumer import write_target

    jobs = [prometheus.ScrapeJob("hanzo-stream-jobs", (), file_sd=str(tmp_path / "targets" / "*.json"))]
    text = prometheus.render_config(jobs, [], "2s", "1s")
    (cfg,) = yaml.safe_load(text)["scrape_configs"]
    assert cfg == {"job_name": "hanzo-stream-jobs",
                   "file_sd_configs": [{"files": [str(tmp_path / "targets" / "*.json")],
                                        "refresh_interval": "5s"}]}
    write_target(str(tmp_path / "targets"), "llm-metrics", "http://127.0.0.1:40123")
    f = tmp_path / "prometheus.yml"
    f.write_text(text)
    res = subprocess.run([shutil.which("promtool") or "promtool", "check", "config", str(f)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
