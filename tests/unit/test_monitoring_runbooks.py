"""Every alert's runbook link opens in a browser: each rule names its runbook by its path in
this repository (checked to exist, down to the section), and every deployment turns that into
a URL under one base: the stack's runbookBaseUrl in the PrometheusRule, the environment's
(or the repository's docs) in the local Prometheus. A page's link is the alert's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from hanzo_stream.local import prometheus
from hanzo_stream.monitoring import RUNBOOK_BASE_ENV, RUNBOOK_BASE_URL, rule_files, with_runbook_links
from hanzo_stream.monitoring.alerts import rule_groups
from hanzo_stream.registry import load_registry

from .infra_helpers import RenderFailed, resource

ROOT = Path(__file__).resolve().parents[2]


def _alerts(groups: list[dict]) -> list[dict]:
    return [r for g in groups for r in g.get("rules", []) if "alert" in r]


def _committed() -> list[dict]:
    return [r for f in rule_files() for r in _alerts(yaml.safe_load(f.read_text())["groups"])]


def _slugs(md: Path) -> set[str]:
    """GitHub's heading anchors: lowercased, punctuation dropped, spaces to hyphens."""
    heads = re.findall(r"^#+\s+(.+?)\s*$", md.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}


def test_every_alert_names_a_runbook_section_that_exists():
    rules = _committed() + _alerts(rule_groups(load_registry(ROOT / "topics.yaml")))
    assert len(rules) >= 55
    missing = [r["alert"] for r in rules if not r.get("annotations", {}).get("runbook_url")]
    assert missing == []
    for r in rules:
        path, _, anchor = r["annotations"]["runbook_url"].partition("#")
        assert "://" not in path and (ROOT / path).is_file(), (r["alert"], path)
        assert not anchor or anchor in _slugs(ROOT / path), (r["alert"], anchor)


def test_links_are_made_absolute_under_the_base_and_nothing_else_changes():
    groups = [{"name": "g", "rules": [
        {"alert": "A", "expr": "1", "annotations": {"runbook_url": "docs/runbooks/x.md#a", "summary": "s"}},
        {"alert": "B", "expr": "1", "annotations": {"runbook_url": "https://elsewhere/b"}},
        {"record": "r", "expr": "1"}]}]
    out = with_runbook_links(groups, "https://docs.example/hs")
    assert out[0]["rules"][0]["annotations"] == {
        "runbook_url": "https://docs.example/hs/docs/runbooks/x.md#a", "summary": "s"}
    assert out[0]["rules"][1:] == groups[0]["rules"][1:]
    assert groups[0]["rules"][0]["annotations"]["runbook_url"] == "docs/runbooks/x.md#a"  # a copy


def _stack_links(*sets: tuple[str, str]) -> list[str]:
    from .infra_helpers import render

    rule = resource(render("prod", sets), "PrometheusRule", "hanzo-stream")["inputs"]
    return [r["annotations"]["runbook_url"] for r in _alerts(rule["spec"]["groups"])]


def test_the_stacks_prometheus_rule_links_under_its_runbook_base():
    links = _stack_links()
    assert len(links) == len(_committed()) and all(u.startswith(RUNBOOK_BASE_URL) for u in links)
    assert RUNBOOK_BASE_URL + "docs/runbooks/kafka-alerts.md#kafkaofflinepartitions" in links
    own = _stack_links(("runbookBaseUrl", "https://wiki.example/stream/"))
    assert all(u.startswith("https://wiki.example/stream/docs/runbooks/") for u in own)
    with pytest.raises(RenderFailed, match="runbookBaseUrl 'docs/' is not an http"):
        _stack_links(("runbookBaseUrl", "docs/"))


def test_the_local_prometheus_loads_copies_with_links_that_open(tmp_path, monkeypatch):
    monkeypatch.delenv(RUNBOOK_BASE_ENV, raising=False)
    copies = prometheus.linked_rules(rule_files(), tmp_path)
    loaded = [r for c in copies for r in _alerts(yaml.safe_load(c.read_text())["groups"])]
    assert [r["alert"] for r in loaded] == [r["alert"] for r in _committed()]
    assert all(r["annotations"]["runbook_url"].startswith(RUNBOOK_BASE_URL) for r in loaded)
    assert [r["expr"] for r in loaded] == [r["expr"] for r in _committed()]
    monkeypatch.setenv(RUNBOOK_BASE_ENV, "http://127.0.0.1:8000/")
    (again,) = prometheus.linked_rules(rule_files()[:1], tmp_path)
    assert "http://127.0.0.1:8000/docs/runbooks/" in again.read_text()
    assert [p.name for p in (tmp_path / "rules").iterdir()] == [again.name]  # no stale copy
