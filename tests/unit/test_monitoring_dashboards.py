"""Grafana dashboards: importable, templated by group and topic, lag first, valid PromQL."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import yaml

from hanzo_stream.monitoring import DASHBOARDS_DIR, dashboards


def _files() -> list[Path]:
    return sorted(DASHBOARDS_DIR.glob("*.json"))


def test_committed_dashboards_are_the_generated_ones() -> None:
    assert sorted(d.file for d in dashboards.DASHBOARDS) == _files()
    for d in dashboards.DASHBOARDS:
        assert d.file.read_text() == dashboards.render(d), f"{d.file} is stale: regenerate"


def test_importable_model_with_uid_and_variables() -> None:
    for f in _files():
        doc = json.loads(f.read_text())
        assert doc["uid"] and len(doc["uid"]) <= 40 and doc["id"] is None
        names = {v["name"]: v for v in doc["templating"]["list"]}
        used = set(re.findall(r"\$\{?(\w+)", json.dumps([p.get("targets") for p in doc["panels"]])))
        assert {"datasource"} | used <= set(names), f"{f.name}: variables used but not defined"
        for var in used - {"datasource"}:
            assert names[var]["multi"] and names[var]["includeAll"] and names[var]["allValue"] == ".*"
        ids = [p["id"] for p in doc["panels"]]
        assert len(ids) == len(set(ids))
        for p in doc["panels"]:
            g = p["gridPos"]
            assert g["x"] + g["w"] <= 24
            if p["type"] != "row":
                assert p["datasource"]["uid"] == "${datasource}" and p["targets"]


def test_rows_in_on_call_order_lag_first() -> None:
    doc = json.loads(dashboards.OVERVIEW.file.read_text())
    rows = [p["title"] for p in doc["panels"] if p["type"] == "row"]
    assert rows[:4] == ["Consumer lag", "Throughput", "Replication health", "Controller state"]
    first = [p for p in doc["panels"] if p["type"] != "row"][:3]
    assert "by consumer group" in first[0]["title"]
    assert any("by partition" in p["title"] for p in first)
    assert doc["panels"][1]["gridPos"]["y"] == 1  # lag at the very top


def test_queries_use_the_templating_and_the_standard_names() -> None:
    queries = dashboards.panel_queries([dashboards.OVERVIEW.file])
    lag = [q for q in queries if "kafka_consumer_group_lag" in q.expr]
    assert lag and all('consumergroup=~"$group"' in q.expr and 'topic=~"$topic"' in q.expr for q in lag)
    exprs = " ".join(q.expr for q in queries)
    for name in ("kafka_messages_in_per_sec", "kafka_bytes_in_per_sec",
                 "kafka_under_replicated_partitions", "kafka_consumer_group_lag"):
        assert name in exprs


def test_panel_queries_reads_every_target(tmp_path: Path) -> None:
    doc = {"uid": "x", "panels": [
        {"type": "row", "title": "r", "collapsed": True,
         "panels": [{"title": "nested", "targets": [{"expr": "up"}]}]},
        {"title": "two", "targets": [{"expr": "a"}, {"expr": "b"}, {"refId": "C"}]}]}
    f = tmp_path / "d.json"
    f.write_text(json.dumps(doc))
    got = [(q.panel, q.expr) for q in dashboards.panel_queries([f])]
    assert sorted(got) == [("nested", "up"), ("two", "a"), ("two", "b")]


def test_expand_substitutes_variables_like_grafana() -> None:
    assert dashboards.expand('x{a=~"$group", b=~"${topic}"}') == 'x{a=~".*", b=~".*"}'
    assert dashboards.expand('x{a=~"$group"}', {"group": "billing-agg"}) == 'x{a=~"billing-agg"}'


def test_every_panel_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each expanded query as a recording rule; a typo fails here, not in Grafana."""
    queries = dashboards.panel_queries()
    rules = {"groups": [{"name": "dashboard-queries", "rules": [
        {"record": f"dashboard:q{i}", "expr": dashboards.expand(q.expr)} for i, q in enumerate(queries)]}]}
    f = tmp_path / "queries.yaml"
    f.write_text(yaml.safe_dump(rules))
    exe = shutil.which("promtool")
    assert exe, "promtool missing: run .ci/install-monitoring.sh"
    res = subprocess.run([exe, "check", "rules", str(f)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{len(queries)} rules found" in res.stdout


def test_llm_dashboard_shows_rates_cost_cache_hits_and_histogram_quantiles() -> None:
    doc = json.loads(dashboards.LLM_DASHBOARD.file.read_text())
    exprs = " ".join(q.expr for q in dashboards.panel_queries([dashboards.LLM_DASHBOARD.file]))
    for q in ("0.5", "0.95", "0.99"):
        assert f"histogram_quantile({q}, sum by (model, le) (rate(hanzo_llm_latency_seconds_bucket" in exprs
    for name in ("hanzo_llm_requests_total", "hanzo_llm_tokens_total", "hanzo_llm_cost_usd_total",
                 "hanzo_llm_cache_hits_total", "hanzo_llm_metrics_events_total"):
        assert name in exprs
    assert "agent_rpc_settlements" in exprs and "rpc-billing" in exprs
    assert {v["name"] for v in doc["templating"]["list"]} == {"datasource", "model", "provider"}
