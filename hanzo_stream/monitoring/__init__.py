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


# Where a page's runbook link opens: the rules name their runbook by its path in this
# repository (docs/runbooks/...), which a pager cannot open, so every deployment prefixes one
# base URL: the repository's docs as a browser shows them, unless a stack (runbookBaseUrl) or
# the local platform (HANZO_STREAM_RUNBOOK_BASE_URL) names its own copy of docs/.
RUNBOOK_BASE_URL = "https://github.com/hanzoai/hanzo-stream/blob/main/"
RUNBOOK_BASE_ENV = "HANZO_STREAM_RUNBOOK_BASE_URL"


def with_runbook_links(groups: list[dict], base: str) -> list[dict]:
    """A copy of rule groups whose relative `runbook_url`s are made absolute under `base`."""
    prefix = base if base.endswith("/") else base + "/"

    def rule(r: dict) -> dict:
        url = (r.get("annotations") or {}).get("runbook_url")
        if not url or "://" in url:
            return r
        return {**r, "annotations": {**r["annotations"], "runbook_url": prefix + url.lstrip("/")}}

    return [{**g, "rules": [rule(r) for r in g.get("rules", [])]} for g in groups]
