"""The client library without a broker: envelopes, validator, router (bad input), dead-letter
records, producer settings and the consumer factory's group check."""

from __future__ import annotations

import copy
import hashlib
import json
import re
import time
import uuid
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from hanzo_stream.client import envelope
from hanzo_stream.client.consumer import UnknownGroup, consumer_config, group_for
from hanzo_stream.client.dead_letters import DEAD_LETTER_MAX_VALUE, headers_dict, record
from hanzo_stream.client.producer import STANDARD_SETTINGS, producer_config
from hanzo_stream.client.router import UNKNOWN_TOPIC, Accepted, Refused, Router
from hanzo_stream.core import dead_letter as dl
from hanzo_stream.core.connection import Connection
from hanzo_stream.schemas.store import DEAD_LETTER_TYPE, load
from hanzo_stream.schemas.validator import Validator

ROOT = Path(__file__).resolve().parents[2]
UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


@pytest.fixture(scope="module")
def schemas():
    return load(ROOT / "schemas")


@pytest.fixture(scope="module")
def router(registry, schemas) -> Router:
    return Router(registry, Validator(schemas))


def llm(**over):
    e = envelope.build("llm.usage.completed", "llm-gateway", {
        "request_id": "r-1", "model": "zen-72b", "provider": "together", "prompt_tokens": 10,
        "completion_tokens": 5, "total_tokens": 15, "cost_usd": 0.000042}, team_id="team_1", org_id="org_1")
    e.update(over)
    return e


def agent(**data):
    return envelope.build("agent.rpc.metered", "agent-gateway", {
        "agent_id": "agent_7", "method": "tools.search", "duration_ms": 3, "units": 1,
        "cost_usd": 0.00001, **data})


def standard(event_type: str) -> dict:
    """The Event Streaming Standard's own example of `event_type`, verbatim."""
    return json.loads((ROOT / "schemas/examples" / event_type / "valid/standard.json").read_text())


# envelope


def test_ids_are_uuid7_time_ordered_and_unique():
    ids = [envelope.new_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    assert all(UUID7.match(i) for i in ids)
    assert uuid.UUID(ids[0]).version == 7
    now_ms = time.time_ns() // 1_000_000
    assert abs(int(ids[-1].replace("-", "")[:12], 16) - now_ms) < 5_000
    assert envelope.new_id(ms=1) < envelope.new_id(ms=2)


def test_timestamps_are_utc_with_exactly_milliseconds():
    t = datetime(2026, 11, 22, 12, 0, 0, 123999, tzinfo=timezone(timedelta(hours=2)))
    assert envelope.iso_ms(t) == "2026-11-22T10:00:00.123Z"
    assert envelope.iso_ms(datetime(2026, 1, 1, tzinfo=UTC)) == "2026-01-01T00:00:00.000Z"
    with pytest.raises(ValueError, match="naive"):
        envelope.iso_ms(datetime(2026, 1, 1))


def test_built_envelopes_validate(schemas):
    v = Validator(schemas)
    assert v.check(llm()) is None
    e = llm()
    assert list(e) == ["schema", "id", "type", "source", "timestamp", "team_id", "org_id", "data"]


# validator


@pytest.mark.parametrize(("mutate", "error_class", "field", "words"), [
    (lambda e: e["data"].update(cost_usd="0.0038"), "schema.type", "data.cost_usd", "a number"),
    (lambda e: e["data"].update(cost_usd="0.0038"), "schema.type", "data.cost_usd", "no quotes"),
    (lambda e: e["data"].update(cost_usd=-0.0038), "schema.value", "data.cost_usd", ">= 0"),
    (lambda e: e["data"].update(cost_usd=True), "schema.type", "data.cost_usd", "boolean"),
    (lambda e: e["data"].update(cost_usd=None), "schema.type", "data.cost_usd", "null"),
    (lambda e: e["data"].pop("cost_usd"), "schema.required", "data.cost_usd", "missing"),
    (lambda e: e["data"].update(cost_micros=42), "schema.unknown_field", "data.cost_micros", "cost_usd"),
    (lambda e: e["data"].update(prompt_tokens=4.2), "schema.type", "data.prompt_tokens", "integer"),
    (lambda e: e["data"].update(prompt_tokens=10.0), "schema.type", "data.prompt_tokens", "decimal point"),
    (lambda e: e["data"].update(prompt_tokens=True), "schema.type", "data.prompt_tokens", "boolean"),
    (lambda e: e["data"].update(cache_hit="false"), "schema.type", "data.cache_hit", "a boolean"),
    (lambda e: e["data"].update(total_tokens="15"), "schema.type", "data.total_tokens", "no quotes"),
    (lambda e: e["data"].pop("provider"), "schema.required", "data.provider", "missing"),
    (lambda e: e.pop("team_id"), "schema.required", "team_id", "requires it"),
    (lambda e: e.update(timestamp="2026-11-22T10:00:00Z"), "schema.value", "timestamp", "add .000"),
    (lambda e: e.update(timestamp="2026-11-22T10:00:00.12Z"), "schema.value", "timestamp", "milliseconds"),
    (lambda e: e.update(timestamp="2026-11-22T10:00:00.123+00:00"), "schema.value", "timestamp", "UTC"),
    (lambda e: e.update(timestamp="2026-11-22T10:00:00.123Z\n"), "schema.value", "timestamp", "e.g."),
    (lambda e: e.update(timestamp=1763805600123), "schema.type", "timestamp", "string"),
    (lambda e: e.update(id="not an id"), "schema.value", "id", "without spaces"),
    (lambda e: e.update(id=""), "schema.value", "id", "1-128 printable ASCII"),
    (lambda e: e.update(id="evt_" + "x" * 125), "schema.value", "id", "1-128 printable ASCII"),
    (lambda e: e.update(id="evt_é"), "schema.value", "id", "ULID or UUIDv7 is recommended"),
    (lambda e: e.update(id=7), "schema.type", "id", "string"),
    (lambda e: e.update(schema="hanzo.stream.v0"), "schema.value", "schema", "hanzo.stream.v1"),
    (lambda e: e.update(tenant="x"), "schema.unknown_field", "tenant", "allowed"),
    (lambda e: e.update(type="llm.usage.started"), "event.unknown_type", "type", "llm.usage.completed"),
    (lambda e: e.update(data=[1]), "schema.type", "data", "object"),
    (lambda e: e["data"].update(prompt_tokens=-1), "schema.value", "data.prompt_tokens", ">= 0"),
    (lambda e: e["data"].update(model=""), "schema.value", "data.model", "at least 1"),
])
def test_validator_names_the_field_and_the_fix(schemas, mutate, error_class, field, words):
    e = llm()
    mutate(e)
    bad = Validator(schemas).check(e)
    assert bad is not None
    assert (bad.error_class, bad.field) == (error_class, field), bad
    assert words in bad.message, bad.message


def test_validator_suggests_the_envelope_field_meant(schemas):
    e = llm()
    e["teamid"] = "team_1"
    bad = Validator(schemas).check(e)
    assert bad.error_class == "schema.unknown_field" and "did you mean `team_id`" in bad.message


def test_validator_compiles_each_type_once(schemas):
    v = Validator(schemas)
    v.check(llm())
    first = v.compiled("llm.usage.completed")
    v.check(llm())
    assert v.compiled("llm.usage.completed") is first


def test_dead_letter_type_is_not_producible_as_an_envelope(schemas):
    assert DEAD_LETTER_TYPE not in Validator(schemas).types


def test_fast_and_detailed_paths_agree_on_examples(schemas):
    v = Validator(schemas)
    for path in (ROOT / "schemas/examples").glob("*/*/*.json"):
        if path.parts[-3] == DEAD_LETTER_TYPE:
            continue
        doc = json.loads(path.read_text())
        event = doc.get("event", doc) if path.parts[-2] == "invalid" else doc
        c = v.compiled(event["type"]) if isinstance(event.get("type"), str) else None
        if c is None:
            continue
        # the hot path (fastjsonschema + the no-float check) vs jsonschema with strict integers
        assert (v.check(event) is None) == c.detailed.is_valid(event), path


# router and bad input


def test_valid_event_is_keyed_by_the_registry_key(router):
    out = router.route_event(llm())
    assert isinstance(out, Accepted)
    assert (out.topic, out.key) == ("llm_usage", b"team_1")
    assert json.loads(out.value) == llm() | {"id": json.loads(out.value)["id"],
                                              "timestamp": json.loads(out.value)["timestamp"]}


def test_key_from_data_when_not_on_the_envelope(router):
    out = router.route_event(agent())
    assert isinstance(out, Accepted) and (out.topic, out.key) == ("agent_rpc_metering", b"agent_7")


def test_audit_and_billing_are_keyed_by_org(router, schemas):
    iam = envelope.build("iam.auth.login_failure", "iam", {
        "email": "u1@hanzo.ai", "method": "password", "reason": "bad_password"}, org_id="org_9")
    assert router.route_event(iam).key == b"org_9"
    bid = hashlib.sha256(b"t|o|2026-11-22T10:00:00.000Z").hexdigest()
    bill = envelope.build("billing.usage.hourly", "hanzo-stream/billing-agg", {
        "billing_id": bid, "team_id": "t", "org_id": "o", "window_start": "2026-11-22T10:00:00.000Z",
        "window_end": "2026-11-22T11:00:00.000Z", "prompt_tokens": 1, "completion_tokens": 1,
        "total_tokens": 2, "cost_usd": 0.0000025, "cost_micros": 3, "request_count": 1},
        team_id="t", org_id="o")
    out = router.route_event(bill)
    assert (out.topic, out.key) == ("billing_events", b"o")


# the Event Streaming Standard's own examples

STANDARD = [  # (event type, topic, the envelope field its key comes from)
    ("llm.usage.completed", "llm_usage", "team_id"),
    ("insights.event.captured", "events_plugin_ingestion", "team_id"),
    ("iam.auth.login_success", "audit_log", "org_id"),
]


@pytest.mark.parametrize(("event_type", "topic", "key_field"), STANDARD, ids=[s[0] for s in STANDARD])
def test_the_standards_examples_are_accepted_as_written(router, event_type, topic, key_field):
    path = ROOT / "schemas/examples" / event_type / "valid/standard.json"
    raw = path.read_bytes()
    event = json.loads(raw)
    want_key = event[key_field].encode()
    for value in (raw, json.dumps(event, separators=(",", ":")).encode()):
        out = router.route_bytes(value)
        assert isinstance(out, Accepted), out
        assert (out.topic, out.key, out.event_type) == (topic, want_key, event_type)
        assert out.value == value  # passed on byte for byte, never re-serialized
        assert isinstance(router.route_bytes(value, topic=topic, key=want_key), Accepted)
    out = router.route_event(copy.deepcopy(event))
    assert isinstance(out, Accepted), out
    assert (out.topic, out.key) == (topic, want_key) and json.loads(out.value) == event


def _uuid7(e):
    e["id"] = envelope.new_id()


def _drop(*fields):
    def edit(e):
        for f in fields:
            e["data"].pop(f)
    return edit


VARIANTS = [  # (event type, edit of the standard's example, or raw text replacements)
    ("llm.usage.completed", _uuid7),
    ("llm.usage.completed", lambda e: e.update(id="01HQ3X7K8M2N4P5R6S7T8U9V0W")),  # a bare ULID
    ("llm.usage.completed", lambda e: e.update(id="x" * 128)),
    ("llm.usage.completed", _drop("latency_ms", "user_id", "api_key_hash", "cache_hit", "stream")),
    ("llm.usage.completed", lambda e: e["data"].update(cost_usd=0)),
    ("llm.usage.completed", lambda e: e["data"].update(cost_usd=12)),
    ("llm.usage.completed", lambda e: e["data"].update(cost_usd=0.123456, cache_hit=True, stream=False)),
    ("llm.usage.completed", ('"cost_usd": 0.0038', '"cost_usd": 3.8e-05')),
    ("llm.usage.completed", ('"cost_usd": 0.0038', '"cost_usd": 3.8E-5')),
    ("llm.usage.completed", ('"cost_usd": 0.0038', '"cost_usd": 0.003800000000')),
    ("insights.event.captured", _uuid7),
    ("insights.event.captured", lambda e: e["data"].update(ip="2001:db8::8a2e:370:7334")),
    ("insights.event.captured", lambda e: e["data"].update(ip="::1")),
    ("insights.event.captured", lambda e: e["data"].update(ip="::ffff:203.0.113.42")),
    ("insights.event.captured", _drop("properties", "ip", "session_id", "sent_at")),
    ("insights.event.captured", lambda e: e["data"].update(properties={})),
    ("insights.event.captured", lambda e: e.update(org_id="org_hanzo")),
    ("iam.auth.login_success", _uuid7),
    ("iam.auth.login_success", lambda e: e["data"].update(ip="2001:db8::1")),
    ("iam.auth.login_success", _drop("email", "provider", "ip", "user_agent", "application")),
    ("iam.auth.login_success", lambda e: e["data"].update(method="password", provider="google")),
    ("iam.auth.login_success", lambda e: e.update(team_id="team_abc123")),
]


@pytest.mark.parametrize(("event_type", "edit"), VARIANTS,
                         ids=[f"{v[0]}-{i}" for i, v in enumerate(VARIANTS)])
def test_variants_of_the_standards_examples_are_accepted(router, event_type, edit):
    topic, key_field = next((t, k) for name, t, k in STANDARD if name == event_type)
    if isinstance(edit, tuple):  # number spellings only raw JSON text can carry
        text = json.dumps(standard(event_type))
        assert text.count(edit[0]) == 1
        value = text.replace(*edit).encode()
        event = json.loads(value)
    else:
        event = standard(event_type)
        edit(event)
        value = json.dumps(event).encode()
        out = router.route_event(copy.deepcopy(event))
        assert isinstance(out, Accepted), out
        assert (out.topic, out.key) == (topic, event[key_field].encode())
    out = router.route_bytes(value)
    assert isinstance(out, Accepted), out
    assert (out.topic, out.key, out.value) == (topic, event[key_field].encode(), value)


OLD_FIELDS = [  # the project's fields before the standard: gone, and refused by name
    ("llm.usage.completed", "cost_micros", 3800),
    ("insights.event.captured", "url", "https://hanzo.ai/dashboard"),
    ("iam.auth.login_success", "actor_id", "user_456"),
    ("iam.auth.login_success", "actor_type", "user"),
    ("iam.auth.login_success", "outcome", "success"),
]


@pytest.mark.parametrize(("event_type", "name", "value"), OLD_FIELDS,
                         ids=[f"{t}-{n}" for t, n, _ in OLD_FIELDS])
def test_the_old_project_fields_are_refused(router, event_type, name, value):
    topic, _ = next((t, k) for n, t, k in STANDARD if n == event_type)
    event = standard(event_type)
    event["data"][name] = value
    for out in (router.route_event(copy.deepcopy(event)), router.route_bytes(json.dumps(event).encode())):
        assert isinstance(out, Refused), out
        assert (out.error.error_class, out.error.field) == ("schema.unknown_field", f"data.{name}")
        assert out.source_topic == topic and out.error.schema == event_type


def test_cost_micros_instead_of_cost_usd_is_refused(router):
    event = standard("llm.usage.completed")
    event["data"]["cost_micros"] = 3800
    del event["data"]["cost_usd"]
    out = router.route_event(event)
    assert isinstance(out, Refused)
    # both are wrong; the missing money field is named first (required ranks before unknown)
    assert (out.error.error_class, out.error.field) == ("schema.required", "data.cost_usd")


BAD_BYTES = [
    ("malformed JSON", b'{"schema": "hanzo.stream.v1", "id": ', "json.malformed", "line 1 column"),
    ("not an object", b"[1, 2, 3]", "schema.type", "JSON object"),
    ("NaN", b'{"a": NaN}', "json.malformed", "line 1 column 7"),
    ("trailing comma", b'{"a": 1,}', "json.malformed", "trailing comma"),
    ("lone surrogate escape", b'{"a": "\\ud800"}', "json.malformed", "surrogate"),
    ("invalid UTF-8", b'{"type": "\xff\xfe"}', "utf8.invalid", "offset 10"),
    ("UTF-16", '{"a": 1}'.encode("utf-16"), "utf8.invalid", "UTF-8"),
    ("empty", b"", "json.malformed", "not one JSON document"),
    ("tombstone", None, "json.malformed", "tombstone"),
    ("deep nesting", b"[" * 100_000 + b"]" * 100_000, None, None),  # size or recursion, never a crash
    ("huge number", b'{"a": ' + b"9" * 5000 + b"}", "json.malformed", "too large for a double"),
]


@pytest.mark.parametrize(("value", "error_class", "words"), [c[1:] for c in BAD_BYTES],
                         ids=[c[0] for c in BAD_BYTES])
def test_bad_bytes_are_refused_with_their_original_bytes(router, value, error_class, words):
    out = router.route_bytes(value, topic="llm_usage")
    assert isinstance(out, Refused)
    assert out.value == value and out.source_topic == "llm_usage"
    if error_class:
        assert out.error.error_class == error_class
        assert words in out.error.message, out.error.message


def test_oversized_payload(registry, schemas):
    r = Router(registry, Validator(schemas), max_event_bytes=1000)
    big = llm()
    big["data"]["model"] = "m" * 2000
    out = r.route_event(big)
    assert isinstance(out, Refused) and out.error.error_class == "size.too_large"
    assert "1000-byte limit" in out.error.message and out.source_topic == "llm_usage"
    assert json.loads(out.value)["data"]["model"] == "m" * 2000


def test_null_and_wrong_keys(router):
    e = agent()
    e["data"].pop("agent_id")
    out = router.route_event(e)
    assert (out.error.error_class, out.error.field) == ("key.missing", "agent_id")
    assert "key of topic agent_rpc_metering" in out.error.message
    out = router.route_bytes(json.dumps(llm(team_id=None)).encode())
    assert (out.error.error_class, out.error.field) == ("key.missing", "team_id")
    out = router.route_bytes(json.dumps(llm(team_id=7)).encode())
    assert (out.error.error_class, out.error.field) == ("schema.type", "team_id")
    value = json.dumps(llm()).encode()
    out = router.route_bytes(value, topic="llm_usage", key=b"team_2")
    assert out.error.error_class == "key.mismatch" and "team_id" in out.error.message
    assert isinstance(router.route_bytes(value, topic="llm_usage", key=b"team_1"), Accepted)


def test_event_for_another_topic(router):
    out = router.route_bytes(json.dumps(llm()).encode(), topic="audit_log")
    assert out.error.error_class == "topic.mismatch" and "llm_usage" in out.error.message
    assert out.source_topic == "audit_log"


def test_unknown_type_goes_to_the_unknown_source(router):
    out = router.route_event(llm(type="llm.usage.exploded"))
    assert out.source_topic == UNKNOWN_TOPIC and out.error.error_class == "event.unknown_type"


def test_unserializable_event_is_dead_lettered_not_raised(router):
    e = envelope.build("insights.event.captured", "insights-capture", {
        "event": "$pageview", "distinct_id": "u", "properties": {"extra": {1, 2}}}, team_id="t")
    out = router.route_event(e)  # a set in the free-form bag: valid, but not JSON
    assert isinstance(out, Refused) and out.error.error_class == "json.unserializable"
    assert b"extra" in out.value and out.source_topic == "events_plugin_ingestion"


def test_lone_surrogate_key_is_refused(router):
    out = router.route_event(llm(team_id="\ud800"))
    assert out.error.error_class == "json.unserializable" and b"team_id" in out.value


def test_nan_in_a_free_form_bag_is_refused_not_nulled(router):
    e = envelope.build("insights.event.captured", "insights-capture", {
        "event": "$pageview", "distinct_id": "u", "properties": {"score": float("nan"), "n": None}},
        team_id="t")
    out = router.route_event(e)
    assert isinstance(out, Refused) and "NaN or Infinity" in out.error.message
    e["data"]["properties"]["score"] = 1.5
    assert isinstance(router.route_event(e), Accepted)


# dead-letter records


def test_dead_letter_record_carries_provenance(router, schemas):
    from jsonschema import Draft202012Validator

    out = router.route_bytes(b'{"oops', topic="llm_usage", key=b"team_1")
    rec = record(out, "producer:llm-gateway", failed_at="2026-11-22T10:00:00.000Z")
    assert (rec.topic, rec.key, rec.value) == (dl.TOPIC, b"llm_usage", b'{"oops')
    h = headers_dict(rec.headers)
    assert h[dl.H_SOURCE_PARTITION] == h[dl.H_SOURCE_OFFSET] == "-1"
    assert h[dl.H_ERROR_CLASS] == "json.malformed" and h[dl.H_ORIGINAL_KEY] == "team_1"
    assert h[dl.H_STAGE] == "producer:llm-gateway"
    Draft202012Validator(schemas.events[DEAD_LETTER_TYPE]).validate(h)


def test_values_too_large_for_dead_letter_are_cut_visibly(registry, schemas):
    r = Router(registry, Validator(schemas), max_event_bytes=100)
    value = b"x" * (DEAD_LETTER_MAX_VALUE + 10)
    rec = record(r.route_bytes(value, topic="llm_usage"), "producer:t")
    h = headers_dict(rec.headers)
    assert len(rec.value) == DEAD_LETTER_MAX_VALUE and value.startswith(rec.value)
    assert h[dl.H_TRUNCATED] == "true" and h[dl.H_ORIGINAL_SIZE] == str(len(value))
    assert h[dl.H_ORIGINAL_SHA256] == hashlib.sha256(value).hexdigest()


BROKER_MAX_MESSAGE = 1_048_588  # Kafka's default message.max.bytes, which dead_letter keeps


def test_a_key_near_the_brokers_limit_makes_a_dead_letter_that_fits(router, schemas):
    """A record key of ~1 MB that differs from the event's: the dead letter's key header, its
    message and its value together stay under the broker's limit, the key cut visibly."""
    from jsonschema import Draft202012Validator

    event = llm()
    value = json.dumps(event).encode()
    key = b"k" * 1_040_000
    out = router.route_bytes(value, topic="llm_usage", key=key)
    assert out.error.error_class == "key.mismatch"
    rec = record(out, "producer:llm-gateway")
    size = len(rec.key) + len(rec.value) + sum(len(k) + len(v) for k, v in rec.headers)
    assert size < BROKER_MAX_MESSAGE - 10_000, size  # room for the batch's own overhead
    h = dict(rec.headers)
    assert h[dl.H_ORIGINAL_KEY] == key[:dl.KEY_MAX] and h[dl.H_KEY_TRUNCATED] == b"true"
    assert h[dl.H_ORIGINAL_KEY_SIZE] == str(len(key)).encode()
    assert h[dl.H_ORIGINAL_KEY_SHA256] == hashlib.sha256(key).hexdigest().encode()
    assert rec.value == value  # the event itself is kept whole
    Draft202012Validator(schemas.events[DEAD_LETTER_TYPE]).validate(headers_dict(rec.headers))


def test_every_header_of_a_dead_letter_is_bounded():
    rec = dl.dead_letter_record("t" * 5000, b"v", b"k", error_class="c" * 5000,
                                error_message="\u00e9" * 100_000, schema="s" * 5000,
                                stage="job:" + "g" * 5000, failed_at="f" * 5000)
    h = dict(rec.headers)
    assert len(h[dl.H_ERROR_MESSAGE]) <= dl.MESSAGE_MAX and h[dl.H_ERROR_MESSAGE].endswith(b"...")
    h[dl.H_ERROR_MESSAGE].decode("utf-8")  # cut on a character boundary
    assert all(len(v) <= dl.TEXT_MAX for k, v in h.items() if k != dl.H_ERROR_MESSAGE)
    assert len(rec.key) <= dl.TEXT_MAX


# producer and consumer settings


def test_producer_uses_the_standard_settings():
    cfg = producer_config(Connection("127.0.0.1:9093", username="u", password="p", ca_file="/ca"))
    assert {k: cfg[k] for k in STANDARD_SETTINGS} == {
        "acks": "all", "enable.idempotence": True,
        # retries as a ~28 s budget of broker refusals, delivery bounded at 120 s
        # (docs/client.md, "Delivery")
        "retries": 30, "retry.backoff.ms": 100, "retry.backoff.max.ms": 1000,
        "delivery.timeout.ms": 120000,
        "max.in.flight.requests.per.connection": 5, "compression.type": "lz4", "batch.size": 16384,
        "linger.ms": 5, "partitioner": "murmur2_random"}
    assert cfg["security.protocol"] == "SASL_SSL" and cfg["sasl.username"] == "u"


def test_producer_overrides_keep_callbacks_and_dot_properties():
    """linger_ms is librdkafka's linger.ms; error_cb stays the Python callback confluent-kafka
    takes (as "error.cb" librdkafka refused it: the rolls test's producer died on it)."""
    from confluent_kafka import Producer

    def on_error(err):
        return None

    cfg = producer_config(Connection("127.0.0.1:1", security_protocol="PLAINTEXT"), linger_ms=7,
                          error_cb=on_error)
    assert cfg["linger.ms"] == 7 and cfg["error_cb"] is on_error and "error.cb" not in cfg
    Producer(cfg).flush(0)  # librdkafka accepts every key


def test_producer_connection_comes_from_the_environment(monkeypatch):
    from hanzo_stream.client.producer import make_producer

    monkeypatch.delenv("HANZO_STREAM_BOOTSTRAP", raising=False)
    from hanzo_stream.core.connection import ConnectionError_

    with pytest.raises(ConnectionError_, match="HANZO_STREAM_BOOTSTRAP"):
        make_producer()


def test_consumer_groups_must_come_from_the_registry(registry):
    with pytest.raises(UnknownGroup, match=r"'analytics' is not in .*known groups: .*analytics-ingest"):
        group_for(registry, "analytics")
    with pytest.raises(UnknownGroup, match="reads llm_usage"):
        group_for(registry, "billing-agg", ["audit_log"])
    g = group_for(registry, "billing-agg", ["llm_usage"])
    cfg = consumer_config(g, Connection("127.0.0.1:9093"))
    assert cfg["group.id"] == "billing-agg" and cfg["enable.auto.offset.store"] is False
    # KIP-848: the broker assigns; a client-side assignor next to it is refused by librdkafka.
    assert cfg["group.protocol"] == "consumer" and "partition.assignment.strategy" not in cfg


def test_make_consumer_refuses_before_connecting(registry):
    from hanzo_stream.client.consumer import make_consumer

    with pytest.raises(UnknownGroup):
        make_consumer("my-adhoc-group", Connection("127.0.0.1:1"), registry=registry)


def test_counts_balance_in_process(registry, schemas):
    from hanzo_stream.client.producer import EventProducer

    class Recorder:
        """Stands in for librdkafka's queue only; the delivery path is tested on a real broker."""

        def __init__(self):
            self.records = []

        def produce(self, topic, value, key, headers=None, on_delivery=None):
            self.records.append((topic, key, value, headers))

    p = EventProducer(Recorder(), registry, schemas, "t")
    good, bad = llm(), copy.deepcopy(llm())
    bad["data"]["cost_usd"] = "1"
    p.send(good)
    p.send(bad)
    p.send_bytes(b"\xff")
    assert (p.counts.received, p.counts.accepted, p.counts.dead_lettered) == (3, 1, 2)
    assert p.counts.balanced
    assert [r[0] for r in p.producer.records] == ["llm_usage", "dead_letter", "dead_letter"]


def test_a_broker_write_error_is_sent_again_and_reported_once(registry, schemas):
    """UNKNOWN / KAFKA_STORAGE_ERROR (a broker's full disk, test_full_disk) are sent again by
    the library, at most RESENDS times; every other error reaches the application at once, and
    each event's outcome reaches it exactly once."""
    from confluent_kafka import KafkaError

    from hanzo_stream.client.producer import RESENDS, EventProducer

    class Broker:
        """librdkafka's queue stood in for: answers each record with the next scripted error."""

        def __init__(self, answers):
            self.answers, self.queue, self.written = list(answers), [], []

        def produce(self, topic, value, key, headers=None, on_delivery=None):
            self.queue.append((topic, value, on_delivery))

        def poll(self, timeout=0):
            served, self.queue = self.queue, []
            for topic, value, report in served:
                code = self.answers.pop(0) if self.answers else None
                if code is None:
                    self.written.append(value)
                msg = SimpleNamespace(topic=lambda t=topic: t, partition=lambda: 0)
                report(None if code is None else KafkaError(code), msg)
            return len(served)

        def flush(self, timeout=0):
            self.poll()
            return len(self.queue)

        def __len__(self):
            return len(self.queue)

    def outcome(answers):
        p = EventProducer(Broker(answers), registry, schemas, "t")
        seen = []
        p.send(llm(), on_delivery=lambda err, msg: seen.append(err and err.code()))
        assert p.flush() == 0
        return seen, p.counts, p.producer.written

    U, S = KafkaError.UNKNOWN, KafkaError.KAFKA_STORAGE_ERROR
    seen, counts, written = outcome([U, S])
    assert (seen, counts.delivered, counts.failed, counts.resent, len(written)) == ([None], 1, 0, 2, 1)
    seen, counts, _ = outcome([U] * (RESENDS + 1))
    assert (seen, counts.failed, counts.resent) == ([U], 1, RESENDS)
    seen, counts, _ = outcome([KafkaError.MSG_SIZE_TOO_LARGE])
    assert (seen, counts.failed, counts.resent) == ([KafkaError.MSG_SIZE_TOO_LARGE], 1, 0)


def test_iso_ms_of_epoch_milliseconds_is_exact():
    # A Kafka timestamp in ms: integer arithmetic, no float rounding at .999
    assert envelope.iso_ms(1_700_000_000_999) == "2023-11-14T22:13:20.999Z"
    assert envelope.iso_ms(0) == "1970-01-01T00:00:00.000Z"
    assert envelope.iso_ms(1_700_000_000_123) == envelope.iso_ms(
        datetime(2023, 11, 14, 22, 13, 20, 123_000, tzinfo=UTC))
