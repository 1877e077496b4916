"""The client library and the Spark jobs give the same verdict on the same bytes.

Both read their contract from schemas/: the client through JSON Schema validators, the jobs
through the rules hanzo_stream/jobs/contract.py compiles into Spark SQL. Thousands of hostile
inputs (hypothesis, derandomized so a failure reproduces) go through both, in a real local
Spark session; every verdict must match: valid, or the same error class and the same message
(the job's is the client's rule, hanzo_stream/schemas/refusals.py: the client's without the
detail about the value it saw).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hanzo_stream.client.router import MAX_JSON_DEPTH, Router
from hanzo_stream.jobs.contract import classify, compile_contract
from hanzo_stream.registry import load_registry
from hanzo_stream.schemas.store import load
from hanzo_stream.schemas.validator import Validator
from tests.unit.test_client_fuzz import VALID, json_values, mutated_events

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = load(ROOT / "schemas")
REGISTRY = load_registry(ROOT / "topics.yaml")
ROUTER = Router(REGISTRY, Validator(SCHEMAS))
JOB_TOPICS = ["events_plugin_ingestion", "llm_usage", "audit_log", "agent_rpc_metering"]  # jobs read
HOSTILE_CASES = 3000

pytestmark = pytest.mark.timeout(900)


@cache
def _texts(i: int) -> tuple[bytes, ...]:
    """Hand-made hostile spellings of example i (built once: some are large)."""
    event = VALID[i]
    text = json.dumps(event)
    ts = event.get("timestamp", "2025-01-15T10:30:00.123Z")
    return (
        text.encode(), text.encode() + b" x", text.encode() + b"}", text.encode() + b"] [",
        text.encode() + b"\n", b"\xef\xbb\xbf" + text.encode(), text.encode()[:-1],
        text.replace('"schema"', '"schema": "x", "schema"', 1).encode(),  # duplicate key, last wins
        text.replace(ts, ts[:19] + "Z").encode(), text.replace(ts, ts[:23]).encode(),
        text.replace(ts, ts[:8] + "31" + ts[10:]).encode(),
        text.replace(ts, ts[:8] + "30" + ts[10:]).replace("-01-", "-02-").encode(),
        text.replace('"data": {', '"data": {"x": NaN, ', 1).encode(),
        text.replace('"data": {', '"data": {"x": 1e400, ', 1).encode(),
        text.replace('"data": {', '"data": {"x": "\\ud800", ', 1).encode(),
        text.replace('"data": {', '"data": {"x": ' + "[" * 1001 + "]" * 1001 + ", ", 1).encode(),
        text.replace('"data": {', '"data": {"x": ' + "[" * 20 + "]" * 20 + ", ", 1).encode(),
        text.replace('"data": {', '"data": {"x": "' + "a" * 300_000 + '", ', 1).encode(),
        text.replace('"id": "', '"id": "\\u00e9', 1).encode(),
        text.replace('"id": "', '"id": 12345678901234567890123, "x": "', 1).encode(),
    )


hostile = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=120).map(lambda t: t.encode("utf-8", "surrogatepass")),
    json_values.map(lambda v: json.dumps(v).encode()),
    mutated_events().map(lambda e: json.dumps(e).encode()),
    mutated_events().map(lambda e: json.dumps(e, ensure_ascii=False).encode()),
    st.integers(0, len(VALID) - 1).flatmap(lambda i: st.sampled_from(_texts(i))),
    st.integers(-(2**65), 2**65).map(lambda n: json.dumps(
        {**VALID[0], "data": {**VALID[0]["data"], "prompt_tokens": n}}).encode()),
    st.none(),
)


Verdict = tuple[str, str] | None  # (error class, message), None: valid


def client_verdict(topic: str, value: bytes | None) -> Verdict:
    out = ROUTER.route_bytes(value, topic=topic)
    if not hasattr(out, "error"):
        return None
    assert out.error.message == out.error.rule + out.error.detail
    return out.error.error_class, out.error.rule


def error_class(v: Verdict) -> str | None:
    return v[0] if v else None


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    s = (SparkSession.builder.master("local[2]").appName("contract-parity")
         .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.sql.variant.allowDuplicateKeys", "true")
         .config("spark.sql.ansi.enabled", "true").getOrCreate())  # as the jobs run (spark.py)
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


def job_verdicts(spark, topic: str, values: list[bytes | None]) -> list[Verdict]:

    c = compile_contract(SCHEMAS, REGISTRY, topic)
    df = spark.createDataFrame([(i, v) for i, v in enumerate(values)], "i int, value binary")
    rows = classify(c, df).select("i", "value", "error_class", "error_message").collect()
    assert len(rows) == len(values)  # count in = valid + dead-lettered: nothing dropped
    # What a job dead-letters: the JVM's verdict, with DEFERRED ones settled on the driver.
    settled = [c.settle(None if r["value"] is None else bytes(r["value"]), r["error_class"],
                        r["error_message"]) for r in sorted(rows, key=lambda r: r["i"])]
    return [None if cls is None else (cls, msg) for cls, msg in settled]


def assert_same(spark, topic: str, values: list[bytes | None]) -> set[str | None]:
    """Every verdict the same on both sides; returns the error classes reached."""
    want = [client_verdict(topic, v) for v in values]
    got = job_verdicts(spark, topic, values)
    diff = [(v[:200] if v else v, w, g) for v, w, g in zip(values, want, got, strict=True) if w != g]
    assert not diff, f"{len(diff)} of {len(values)} verdicts differ (input, client, job): {diff[:5]}"
    return {error_class(w) for w in want}


@pytest.mark.parametrize("topic", JOB_TOPICS)
def test_every_example_gets_the_same_verdict(spark, topic):
    values = []
    for p in sorted((ROOT / "schemas/examples").glob("*/*/*.json")):
        doc = json.loads(p.read_text())
        values.append(json.dumps(doc["event"] if p.parts[-2] == "invalid" else doc).encode())
    values.append(json.dumps(json.loads((ROOT / "schemas/examples" / {  # the standard's, where it has one
        "events_plugin_ingestion": "insights.event.captured/valid/standard.json",
        "llm_usage": "llm.usage.completed/valid/standard.json",
        "audit_log": "iam.auth.login_success/valid/standard.json",
        "agent_rpc_metering": "agent.rpc.metered/valid/call.json"}[topic]).read_text())).encode())
    outcomes = assert_same(spark, topic, values)
    assert None in outcomes and len(outcomes) > 5, outcomes
    assert client_verdict(topic, values[-1]) is None  # the topic's own example is valid here


@pytest.fixture(scope="module")
def hostile_inputs() -> list[bytes | None]:
    """HOSTILE_CASES inputs from hypothesis (derandomized: the same cases every run)."""
    out: list[bytes | None] = []

    @settings(max_examples=HOSTILE_CASES, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(hostile)
    def collect(value):
        out.append(value)

    collect()
    return out


@pytest.mark.parametrize("topic", JOB_TOPICS)
def test_thousands_of_hostile_inputs_get_the_same_verdict(spark, topic, hostile_inputs):
    assert len(hostile_inputs) >= HOSTILE_CASES // 2  # hypothesis may stop early on duplicates
    outcomes = assert_same(spark, topic, hostile_inputs)
    assert None in outcomes and len(outcomes) > 5, outcomes  # reached valid and many refusals


def test_nesting_limit_is_the_same_on_both_sides(spark):
    def nested(n: int) -> bytes:
        e = dict(VALID[0])
        return json.dumps(e).replace('"data": {', '"data": {"x": ' + "[" * n + "]" * n + ", ", 1).encode()

    values = [nested(n) for n in (MAX_JSON_DEPTH - 3, MAX_JSON_DEPTH - 2, MAX_JSON_DEPTH - 1, 2000)]
    assert_same_or_report = [client_verdict("llm_usage", v) for v in values]
    assert job_verdicts(spark, "llm_usage", values) == assert_same_or_report
    assert "json.malformed" in {error_class(v) for v in assert_same_or_report}


def test_long_string_values_are_checked_not_crashed(spark):
    """A long string value (a big prompt, a stack trace in an audit reason), with and without
    escapes, gets the client's verdict: the contract's string-blanking regex stays linear in
    Java's engine, where an alternation under `*` recursed per character and overflowed."""
    event = VALID[0]  # an llm.usage.completed: unknown fields are refused, so an extra is too
    text = json.dumps(event)
    values = [
        text.replace('"data": {', '"data": {"x": "' + body + '", ', 1).encode()
        for body in ("a" * 200_000, 'ab\\"' * 50_000, "\\\\" * 60_000 + "1e999")
    ] + [text.replace('"data": {', '"data": {"x": 1e999, "y": "' + "z" * 100_000 + '", ', 1).encode()]
    outcomes = assert_same(spark, "llm_usage", values)
    assert len(outcomes) >= 2, outcomes  # a number out of range is told from a long string


def test_a_crafted_value_for_a_pattern_is_refused_by_both_engines(spark):
    """An email of ~256 KiB crafted against the pattern shipped until 2026-11-27 (quadratic in
    both Python's and Java's engines: minutes per event), and values that repeat a pattern's
    group 100,000 times (Java's engine recursed per repetition: a StackOverflowError that failed
    the batch on every retry): refused as too long, before any pattern runs, on both sides."""
    example = ROOT / "schemas/examples/iam.auth.login_failure/valid"
    event = json.loads(sorted(example.glob("*.json"))[0].read_text())
    values = []
    for body in ("." * (256 * 1024 - 1000), "a." * 100_000 + "@", "a." * 100_000 + "a"):
        values.append(json.dumps({**event, "data": {**event["data"], "email": "a@" + body}}).encode())
    values.append(json.dumps({**event, "type": "a" + ".a" * 100_000}).encode())
    assert assert_same(spark, "audit_log", values) == {"schema.value"}
    assert all("at most 1024 character(s)" in client_verdict("audit_log", v)[1] for v in values)


def test_another_topics_types_are_deferred_to_the_client_after_the_jobs_own_checks(spark):
    """The JVM holds only its topic's rules; another topic's type is DEFERRED and settled by the
    client, but never ahead of a problem the job finds first (malformed JSON is blamed first)."""
    from pyspark.sql import functions as F

    from hanzo_stream.jobs.contract import DEFERRED

    llm = dict(VALID[0])  # an llm.usage.completed, valid on llm_usage
    no_model = {**llm, "data": {k: v for k, v in llm["data"].items() if k != "model"}}
    values = [json.dumps(llm).encode(), json.dumps(no_model).encode(),
              json.dumps(llm).replace('"data": {', '"data": {"x": 1e999, ', 1).encode(), b"{nope"]
    c = compile_contract(SCHEMAS, REGISTRY, "events_plugin_ingestion")
    df = spark.createDataFrame([(i, v) for i, v in enumerate(values)], "i int, value binary")
    raw = [r["error_class"] for r in classify(c, df).orderBy("i").select(F.col("error_class")).collect()]
    assert raw == [DEFERRED, DEFERRED, "json.malformed", "json.malformed"]
    settled = job_verdicts(spark, "events_plugin_ingestion", values)
    assert [error_class(v) for v in settled[:2]] == [
        "topic.mismatch", error_class(client_verdict("events_plugin_ingestion", values[1]))]
    assert settled == [client_verdict("events_plugin_ingestion", v) for v in values]
