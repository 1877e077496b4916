"""Monitoring as code: alert rules derived from the registry, dashboards, the lag exporter.

The hand-written parts (JMX exporter rules, recording rules, broker alerts, promtool tests)
live in monitoring/; what depends on topics.yaml (per-group lag thresholds, the
dead-letter alert) is generated here so each threshold lives only in the registry.
`python -m hanzo_stream.monitoring generate` rewrites the generated files; `--check`
fails when they are stale.
"""

from __future__ import annotations

from pathlib import Path

MONITORING_DIR = Path(__file__).resolve().parents[2] / "monitoring"
RULES_DIR = MONITORING_DIR / "rules"
DASHBOARDS_DIR = MONITORING_DIR / "dashboards"
JMX_RULES_FILE = MONITORING_DIR / "jmx-exporter.yaml"


def rule_files() -> list[Path]:
    """Every Prometheus rule file Prometheus should load (promtool test files excluded)."""
    return sorted(p for p in RULES_DIR.glob("*.yaml") if ".test." not in p.name)
