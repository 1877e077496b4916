"""llm-metrics against the real SASL_SSL broker (registry ACLs only) and a real Prometheus.

Known llm.usage.completed events in -> the exact counters, cost and histogram buckets out, as
Prometheus scraped them; histogram_quantile gives the p50/p95/p99 this test computes itself;
invalid records are dead-lettered with provenance; committed offsets show the lag. Then a
crash: a consumer that read more but never checkpointed is killed (SIGKILL), /metrics never
showed its uncommitted counts, and after the restart every counter is exact again with no
counter reset in Prometheus. Every panel of the LLM dashboard returns data.

Every event carries run-scoped model names: llm_usage is shared with the other jobs' tests,
and the consumer counts the whole topic.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
import uuid
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from hanzo_stream.core import dead_letter as dl
from hanzo_stream.jobs import process
from hanzo_stream.jobs.consumer import LISTEN_ENV
from hanzo_stream.local import kafka, kafka_exporter, prometheus
from hanzo_stream.monitoring import dashboards, rule_files
from hanzo_stream.registry.platform import LAG_EXPORTER
from tests.integration.conftest import apply_registry, wait_for
from tests.integration.spark_harness import (
    ROOT,
    client_says,
    dead_letters,
    envelope,
    fast_specs,
    headers,
    iso,
    job_env,
    offsets_of,
    produce,
    uuid7,
)

pytestmark = pytest.mark.integration

JOB, PRINCIPAL, TOPIC = "llm-metrics", "llm-metrics", "llm_usage"
BOUNDS = [Decimal(b) for b in ("0.25", "0.5", "1", "2.5", "5", "10", "20", "30", "60", "120")]  # the spec's
WAIT = 180  # a restarted member waits out the dead one's session (10 s) and a rebalance


@pytest.fixture(scope="module")
def cluster(hip_cluster, registry):
    """The session broker with topics.yaml applied: llm-metrics has exactly the registry's ACLs."""
    apply_registry(hip_cluster, registry)
    return hip_cluster


def usage(model: str, provider: str, i: int, latency: int | None, cost: float, cache: bool) -> dict:
    data = {"request_id": f"req-{uuid.uuid4().hex[:8]}", "model": model, "provider": provider,
            "prompt_tokens": 100 + i, "completion_tokens": 7 * i, "total_tokens": 100 + 8 * i,
            "cost_usd": cost, "cache_hit": cache, "stream": i % 2 == 0}
    if latency is not None:
        data["latency_ms"] = latency
    ts = datetime(2030, 1, 2, 3, tzinfo=UTC) + timedelta(seconds=i)
    return envelope("llm.usage.completed", iso(ts), data, team_id=f"team-{i % 3}", org_id="org-1")


def batch(run: str, n0: int) -> list[dict]:
    """Two models; latencies on, just above and beyond the bucket bounds; costs whose float sum
    differs from the decimal one; some cache hits; one event without latency_ms."""
    zen, claude = f"{run}-zen", f"{run}-claude"
    lat = [250, 250, 251, 500, 999, 1000, 1001, 2500, 4000, 10000, 19999, 30000, 60001, 120000, 120001]
    costs = [0.1, 0.2, 0.7, 0.0038, 1.0000005, 3.8e-05]
    out = [usage(zen, "together", n0 + i, ms, costs[i % len(costs)], i % 5 == 0) for i, ms in enumerate(lat)]
    out.append(usage(zen, "together", n0 + 99, None, 0.1, False))
    out += [usage(claude, "anthropic", n0 + i, 300 * (i + 1), costs[(i + 2) % len(costs)], False)
            for i in range(6)]
    return out


def expected(events: list[dict]) -> dict[tuple[str, str], dict]:
    """The ground truth, computed here: per (model, provider) counts, exact cost, buckets."""
    out: dict[tuple[str, str], dict] = defaultdict(lambda: {
        "requests": 0, "hits": 0, "prompt": 0, "completion": 0, "cost": Decimal(0), "count": 0,
        "sum_ms": 0, "buckets": Counter()})
    for e in events:
        d = e["data"]
        x = out[(d["model"], d["provider"])]
        x["requests"] += 1
        x["hits"] += d["cache_hit"]
        x["prompt"] += d["prompt_tokens"]
        x["completion"] += d["completion_tokens"]
        x["cost"] += Decimal(json.dumps(d["cost_usd"]))  # the decimal text the producer wrote
        if "latency_ms" in d:
            x["count"] += 1
            x["sum_ms"] += d["latency_ms"]
            for b in BOUNDS:
                x["buckets"][b] += d["latency_ms"] <= b * 1000  # `le` is inclusive
    return out


def quantile(q: float, buckets: Counter, count: int) -> float:
    """Prometheus' histogram_quantile on classic buckets, for the expected value."""
    rank, prev_bound, prev_count = q * count, 0.0, 0
    for b in BOUNDS:
        if buckets[b] >= rank:
            return prev_bound + (float(b) - prev_bound) * (rank - prev_count) / (buckets[b] - prev_count)
        prev_bound, prev_count = float(b), buckets[b]
    return float(BOUNDS[-1])  # in +Inf: the highest finite bound


def scrape(port: int) -> dict[tuple, float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {(s.name, *sorted(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(prom: str, promql: str) -> float | None:
    r = prometheus.query(prom, promql)
    return float(r[0]["value"][1]) if r else None


def assert_exact(prom: str, want: dict[tuple[str, str], dict]) -> None:
    """Every series of every model, as Prometheus has it, equals the ground truth."""
    for (model, provider), x in want.items():
        sel = f'model="{model}", provider="{provider}"'
        assert value(prom, f"hanzo_llm_requests_total{{{sel}}}") == x["requests"]
        assert value(prom, f"hanzo_llm_cache_hits_total{{{sel}}}") == x["hits"]
        assert value(prom, f'hanzo_llm_tokens_total{{{sel}, kind="prompt"}}') == x["prompt"]
        assert value(prom, f'hanzo_llm_tokens_total{{{sel}, kind="completion"}}') == x["completion"]
        assert value(prom, f"hanzo_llm_cost_usd_total{{{sel}}}") == float(x["cost"])
        got = {r["metric"]["le"]: float(r["value"][1])
               for r in prometheus.query(prom, f"hanzo_llm_latency_seconds_bucket{{{sel}}}")}
        assert got == {**{repr(float(b)): x["buckets"][b] for b in BOUNDS}, "+Inf": x["count"]}
        assert value(prom, f"hanzo_llm_latency_seconds_count{{{sel}}}") == x["count"]
        assert value(prom, f"hanzo_llm_latency_seconds_sum{{{sel}}}") == x["sum_ms"] / 1000
        for q in (0.5, 0.95, 0.99):
            got_q = value(prom, f"histogram_quantile({q}, sum by (le) "
                                f"(hanzo_llm_latency_seconds_bucket{{{sel}}}))")
            assert got_q == pytest.approx(quantile(q, x["buckets"], x["count"]), rel=1e-12), (model, q)


def settled(prom: str, want: dict[tuple[str, str], dict]) -> bool:
    """Prometheus has scraped the final value of every model's request counter."""
    return all(value(prom, f'hanzo_llm_requests_total{{model="{m}", provider="{p}"}}') == x["requests"]
               for (m, p), x in want.items())


def start(cluster, home: Path, consumers: Path, port: int) -> None:
    process.start(JOB, home, job_env(cluster, PRINCIPAL, home), registry=ROOT / "topics.yaml",
                  consumers=consumers, cwd=ROOT, extra_env={LISTEN_ENV: f"127.0.0.1:{port}"})


def test_llm_metrics_counts_known_events_exactly_and_survives_a_crash(cluster, tmp_path):
    run = uuid.uuid4().hex[:8]
    port = kafka.free_ports(1)[0]
    for d in ("fast", "never"):
        (tmp_path / d).mkdir()
    fast = fast_specs(tmp_path / "fast", JOB, trigger="1s")
    never = fast_specs(tmp_path / "never", JOB, trigger="1h")  # checkpoints only when stopped
    home = tmp_path / "home"
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(prometheus.stop, tmp_path / "prometheus")
        cleanup.callback(kafka_exporter.stop, tmp_path / "exporter")
        cleanup.callback(process.kill, JOB, home)
        exporter = kafka_exporter.start(tmp_path / "exporter", cluster.as_(LAG_EXPORTER))
        prom = prometheus.start(tmp_path / "prometheus", [
            prometheus.ScrapeJob(JOB, (f"127.0.0.1:{port}",)),
            prometheus.ScrapeJob.from_urls(prometheus.EXPORTER_JOB, [exporter])],
            rules=rule_files(), scrape_interval="1s", evaluation_interval="1s")

        # -------- batch 1: valid events, producer retries, invalid records
        events1 = batch(run, 0)
        retried = [events1[0], events1[7], events1[-1]]
        good = events1[1]
        bad = [(b"k", {**good, "id": uuid7(), "data": {**good["data"], "cost_usd": "0.1"}}, "schema.type"),
               (b"k", {**good, "id": uuid7(), "data": {**good["data"], "latency": 5}},
                "schema.unknown_field"),
               (b"k", {**good, "id": uuid7(), "data": {**good["data"], "prompt_tokens": -1}}, "schema.value"),
               (b"k", b"{not json", "json.malformed")]
        for _, v, cls in bad:  # the client library's verdict is the job's
            assert client_says(TOPIC, v) == cls
        where1 = produce(cluster, "llm-gateway", TOPIC, [(e["team_id"], e) for e in events1 + retried]
                         + [(k, v) for k, v, _ in bad])
        start(cluster, home, fast, port)
        want1 = expected(events1)
        wait_for(lambda: settled(prom, want1), WAIT, "batch 1 counted and scraped")
        assert_exact(prom, want1)
        committed, ends = offsets_of(cluster, JOB, TOPIC)
        assert committed == ends  # lag 0: the group commits what it counted
        letters = dead_letters(cluster, JOB, TOPIC, set(where1))
        got = {(int(headers(m)[dl.H_SOURCE_PARTITION]), int(headers(m)[dl.H_SOURCE_OFFSET])):
               (headers(m)[dl.H_ERROR_CLASS].decode(), m.value()) for m in letters}
        n = len(events1) + len(retried)
        assert got == {pos: (cls, v if isinstance(v, bytes) else json.dumps(v).encode())
                       for pos, (_, v, cls) in zip(where1[n:], bad, strict=True)}
        assert all(headers(m)[dl.H_SCHEMA] == b"llm.usage.completed" for m in letters)

        # -------- batch 2 read by a member that never checkpoints, then SIGKILL
        assert process.stop(JOB, home)
        start(cluster, home, never, port)
        events2 = batch(run, 1000)
        produce(cluster, "llm-gateway", TOPIC, [(e["team_id"], e) for e in events2 + events2[:2]])
        time.sleep(15)  # it reads batch 2 (not observable from outside: nothing is shown or committed)
        scraped = scrape(port)
        for (m, p), x in want1.items():  # /metrics still shows exactly the checkpointed counts
            assert scraped[("hanzo_llm_requests_total", ("model", m), ("provider", p))] == x["requests"]
        committed, ends = offsets_of(cluster, JOB, TOPIC)
        lag = sum(ends.values()) - sum(committed.values())
        assert lag >= len(events2)  # the lag shows
        # ... to the exporter too, logged in as lag-exporter (DESCRIBE on topics and groups only)
        wait_for(lambda: value(prom, f'sum(kafka_consumergroup_lag{{consumergroup="{JOB}", '
                                     f'topic="{TOPIC}"}})') == lag, 60,
                 f"kafka_consumergroup_lag of {JOB} = {lag}, as the lag-exporter principal")
        assert process.kill(JOB, home)
        wait_for(lambda: value(prom, f'up{{job="{JOB}"}}') == 0, 60, "the killed job's target down")

        # -------- restart: counters continue exactly, no reset, nothing counted twice
        start(cluster, home, fast, port)
        want = expected(events1 + events2)
        wait_for(lambda: settled(prom, want), WAIT, "batch 2 counted after the restart")
        assert_exact(prom, want)
        for (m, p) in want:
            assert value(prom, f'resets(hanzo_llm_requests_total{{model="{m}", provider="{p}"}}[10m])') == 0
        wait_for(lambda: (lambda c, e: c == e)(*offsets_of(cluster, JOB, TOPIC)), 60, "lag 0 again")
        # It resumed at its checkpoint, not at the topic's start with fresh counters (same totals,
        # but batch 1's invalid records would be dead-lettered a second time).
        assert len(dead_letters(cluster, JOB, TOPIC, set(where1))) == len(bad)

        # -------- every panel of the LLM dashboard has data for this run's models
        variables = {"model": f"{run}-.*", "provider": ".*"}
        queries = dashboards.panel_queries([dashboards.LLM_DASHBOARD.file])
        assert len(queries) >= 8

        deadline = time.monotonic() + 90
        while True:
            missing = [f"{q.panel}: {q.expr}" for q in queries
                       if not prometheus.query(prom, dashboards.expand(q.expr, variables))]
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert not missing, "LLM dashboard panels without data:\n" + "\n".join(missing)
