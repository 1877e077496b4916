"""The few Prometheus HTTP API calls the platform makes (status, tests), stdlib only."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request


def api(base_url: str, path: str, **params: str) -> dict:
    query = urllib.parse.urlencode(params)
    with urllib.request.urlopen(f"{base_url}/api/v1/{path}?{query}", timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"Prometheus {path} failed: {body}")
    return body["data"]


def query(base_url: str, promql: str) -> list[dict]:
    """Instant query; the result vector ([{metric: {...}, value: [t, "v"]}, ...])."""
    return api(base_url, "query", query=promql)["result"]


def targets(base_url: str) -> list[dict]:
    return api(base_url, "targets")["activeTargets"]


def alerts(base_url: str) -> list[dict]:
    return api(base_url, "alerts")["alerts"]


def rule_groups(base_url: str) -> list[dict]:
    return api(base_url, "rules")["groups"]
