"""Grafana dashboards: importable, templated by group and topic, lag first, valid PromQL; the
dead-letter dashboard on the series the dead-letter alerts page on."""

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


def test_every_dashboard_shares_the_one_datasource_variable() -> None:
    for d in dashboards.DASHBOARDS:
        doc = json.loads(d.file.read_text())
        assert doc["templating"]["list"][0] == dashboards.DATASOURCE_VARIABLE, d.uid


def test_dead_letter_dashboard_reads_the_alerts_series_filtered_by_topic_stage_and_class() -> None:
    from hanzo_stream.monitoring import alerts

    d = dashboards.DEAD_LETTER_DASHBOARD
    assert d in dashboards.DASHBOARDS and d.uid == "hanzo-stream-dead-letters"
    doc = json.loads(d.file.read_text())
    assert doc["uid"] == d.uid and "Dead letters" in doc["title"]
    assert [v["name"] for v in doc["templating"]["list"]] == ["datasource", *alerts.DEAD_LETTER_LABELS]
    queries = dashboards.panel_queries([d.file])
    counted = [q for q in queries
               if alerts.DEAD_LETTER_COUNTER in q.expr or alerts.DEAD_LETTER_RECORD in q.expr]
    # rates of the counter by each label, the exact window counts (a stat and a table)
    assert len([q for q in counted if alerts.DEAD_LETTER_COUNTER in q.expr]) == 3
    assert len([q for q in counted if alerts.DEAD_LETTER_RECORD in q.expr]) == 2
    for q in counted:
        for label in alerts.DEAD_LETTER_LABELS:
            assert f'{label}=~"${label}"' in q.expr, q
    for label in alerts.DEAD_LETTER_LABELS:
        assert any(f"sum by ({label}) (rate({alerts.DEAD_LETTER_COUNTER}" in q.expr for q in queries)
    exprs = " ".join(q.expr for q in queries)
    assert f'alertname=~"{alerts.DEAD_LETTER_ALERT}.*"' in exprs and 'alertstate="firing"' in exprs
    assert f'{alerts.LAG_METRIC}{{consumergroup="dead-letter-monitor"}}' in exprs
    assert 'up{job=~".*dead-letter-monitor.*"}' in exprs
    # the window count comes first, and every panel tells on-call what to do
    panels = [p for p in doc["panels"] if p["type"] != "row"]
    assert alerts.DEAD_LETTER_RECORD in panels[0]["targets"][0]["expr"] and panels[0]["type"] == "stat"
    assert all(p.get("description") for p in panels)
    assert alerts.DEAD_LETTER_RUNBOOK in " ".join(p["description"] for p in panels[:3])


def test_dead_letter_rules_fire_alerts_the_dashboard_selects(registry) -> None:
    from hanzo_stream.monitoring import alerts

    selector = re.search(r'alertname=~"([^"]+)"', " ".join(
        q.expr for q in dashboards.panel_queries([dashboards.DEAD_LETTER_DASHBOARD.file]))).group(1)
    names = {r["alert"] for g in alerts.rule_groups(registry) for r in g["rules"]
             if "alert" in r and r["annotations"]["runbook_url"] == alerts.DEAD_LETTER_RUNBOOK}
    assert names == {"DeadLettersArriving", "DeadLettersWarning", "DeadLettersCritical"}
    assert all(re.fullmatch(selector, n) for n in names)


def test_dead_letter_dashboard_monitor_series_are_what_the_monitor_serves(registry) -> None:
    """Every hanzo_stream_* name the dashboard queries is in the monitor's exposition."""
    from prometheus_client import generate_latest

    from hanzo_stream.monitoring.dead_letter_monitor import Monitor

    m = Monitor(None, registry)  # type: ignore[arg-type]  (the consumer is only built by run())
    m.dead_letters.labels("audit_log", "job:audit-archive", "schema.required").inc()
    m.offset.labels("dead_letter", "0").set(1)
    served = set(re.findall(r"^(hanzo_stream_\w+)", generate_latest(m.metrics).decode(), re.M))
    exprs = " ".join(q.expr for q in dashboards.panel_queries([dashboards.DEAD_LETTER_DASHBOARD.file]))
    used = set(re.findall(r"\b(hanzo_stream_\w+)", exprs))
    assert len(used) >= 3 and used <= served, used - served


def test_every_alert_the_rules_define_shows_as_an_annotation() -> None:
    """The firing-alerts annotation names alerts by pattern: each rule's alert must match it
    (ConsumerStalled once did not, so stalls never showed on a dashboard)."""
    rules = Path(DASHBOARDS_DIR).parent / "rules"
    names = {r["alert"] for f in rules.glob("*.yaml") for g in yaml.safe_load(f.read_text())["groups"]
             for r in g["rules"] if "alert" in r}
    assert {"ConsumerStalled", "ConsumerLagCritical"} <= names
    for d in dashboards.DASHBOARDS:
        [note] = json.loads(d.file.read_text())["annotations"]["list"]
        pattern = re.search(r'alertname=~"([^"]+)"', note["expr"]).group(1)
        assert not {n for n in names if not re.fullmatch(pattern, n)}, d.uid


def _colour(panel: dict, value: float) -> str:
    """What Grafana paints a value: the highest threshold step at or below it."""
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    colour = steps[0]["color"]
    for step in steps[1:]:
        if value >= step["value"]:
            colour = step["color"]
    return colour


def _overview_panel(title: str) -> dict:
    doc = json.loads(dashboards.OVERVIEW.file.read_text())
    found = [p for p in doc["panels"] if p.get("title") == title]
    assert len(found) == 1, title
    return found[0]


def test_on_call_colours_mean_what_the_titles_say() -> None:
    controllers = _overview_panel("Active controllers (must be 1)")
    assert [_colour(controllers, v) for v in (0, 1, 2, 3)] == ["red", "green", "red", "red"]
    assert "or vector(0)" in controllers["targets"][0]["expr"]  # no controller at all reads 0
    leader = _overview_panel("Quorum leader (node id)")
    assert [_colour(leader, v) for v in (-1, 0, 2)] == ["red", "green", "green"]
    free = _overview_panel("Data volume free")
    assert [_colour(free, v) for v in (0.01, 0.10, 0.5)] == ["red", "orange", "green"]


def test_the_disk_panel_colours_at_the_alerts_thresholds() -> None:
    rules = yaml.safe_load((DASHBOARDS_DIR.parent / "rules" / "kafka-alerts.yaml").read_text())
    exprs = {r["alert"]: r["expr"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    low = float(exprs["KafkaDiskSpaceLow"].split("<")[1])
    critical = float(exprs["KafkaDiskSpaceCritical"].split("<")[1])
    steps = _overview_panel("Data volume free")["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["value"] for s in steps[1:]] == [critical, low]


def test_the_overview_has_quorum_jvm_and_disk_rows() -> None:
    doc = json.loads(dashboards.OVERVIEW.file.read_text())
    rows = [p["title"] for p in doc["panels"] if p["type"] == "row"]
    assert {"KRaft quorum", "Broker JVM and host", "Disk"} <= set(rows)


def test_panels_left_to_node_metrics_exist_and_read_only_those() -> None:
    """Every panel a live test may skip is a real panel, and reads the node-metrics series."""
    by_title = {q.panel: q.expr for q in dashboards.panel_queries()}
    for title in dashboards.FROM_NODE_METRICS:
        assert by_title[title] == "hanzo_stream:kafka_volume_available:ratio", title
