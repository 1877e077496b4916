"""Fuzzing the router: thousands of hostile inputs, zero crashes, zero lost.

Every input ends as exactly one Accepted or Refused; a refused record keeps its exact
original bytes and gets a dead-letter record whose headers match the stream.dead_letter
schema; anything accepted is valid under the strict (jsonschema) validator too, so the
fast path never lets a bad event through. The producer's counts balance: in = valid +
dead-lettered. The same property runs against a real broker in
tests/integration/test_client_produce.py.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from hanzo_stream.client.dead_letters import headers_dict, record
from hanzo_stream.client.producer import EventProducer
from hanzo_stream.client.router import Accepted, Refused, Router
from hanzo_stream.registry import load_registry
from hanzo_stream.schemas.store import DEAD_LETTER_TYPE, load
from hanzo_stream.schemas.validator import Validator

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = load(ROOT / "schemas")
REGISTRY = load_registry(ROOT / "topics.yaml")
VALIDATOR = Validator(SCHEMAS)
ROUTER = Router(REGISTRY, VALIDATOR, max_event_bytes=4096)
DL_SCHEMA = Draft202012Validator(SCHEMAS.events[DEAD_LETTER_TYPE])
VALID = [json.loads(p.read_text()) for p in sorted((ROOT / "schemas/examples").glob("*/valid/*.json"))
         if p.parts[-3] != DEAD_LETTER_TYPE]
TOPICS = [None, *(t.name for t in REGISTRY.topics)]
FUZZ = settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=30))
json_values = st.recursive(json_scalars, lambda c: st.one_of(
    st.lists(c, max_size=4), st.dictionaries(st.text(max_size=12), c, max_size=4)), max_leaves=12)


@st.composite
def mutated_events(draw):
    """A valid example with a few random edits: the inputs that nearly pass are the dangerous ones."""
    event = copy.deepcopy(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(0, 3))):
        target = event if draw(st.booleans()) or not isinstance(event.get("data"), dict) else event["data"]
        op = draw(st.sampled_from(["drop", "set", "add", "retype"]))
        keys = sorted(target)
        if op == "drop" and keys:
            target.pop(draw(st.sampled_from(keys)))
        elif op == "set" and keys:
            target[draw(st.sampled_from(keys))] = draw(json_values)
        elif op == "add":
            target[draw(st.text(max_size=10))] = draw(json_values)
        elif op == "retype" and keys:
            k = draw(st.sampled_from(keys))
            v = target[k]
            suffix = draw(st.sampled_from(["\n", "Z", "", "é"]))
            target[k] = (float(v) if isinstance(v, int) and not isinstance(v, bool) else
                         str(v) if not isinstance(v, str) else v + suffix)
    return event


def encodings(event) -> st.SearchStrategy[bytes]:
    text = json.dumps(event, ensure_ascii=False)
    return st.sampled_from([
        text.encode(), text.encode("utf-16"), text.encode("latin-1", "replace"),
        text.encode()[: max(1, len(text) // 2)], (text * 3).encode(),
        text.encode() + b"\xff", b"\xef\xbb\xbf" + text.encode(),
    ])


raw_inputs = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
    json_values.map(lambda v: json.dumps(v).encode()),
    mutated_events().flatmap(encodings),
    mutated_events().map(lambda e: json.dumps(e).encode()),
)


class Recorder:
    """Only librdkafka's queue is replaced here; the real broker path is an integration test."""

    def __init__(self):
        self.records: list[tuple] = []

    def produce(self, topic, value, key, headers=None, on_delivery=None):
        self.records.append((topic, key, value, headers))


def _check_outcome(out, original: bytes | None):
    assert isinstance(out, Accepted | Refused)
    if isinstance(out, Refused):
        assert out.value == original or original is None
        assert out.error.message and out.error.error_class
        rec = record(out, "producer:fuzz")
        h = headers_dict(rec.headers)
        assert DL_SCHEMA.is_valid(h), h
        assert rec.value == original or original is None
    else:
        event = json.loads(out.value)
        strict = VALIDATOR.compiled(event["type"]).detailed
        assert strict.is_valid(event), out.value
        assert out.key and isinstance(out.key, bytes)


@FUZZ
@given(value=raw_inputs, topic=st.sampled_from(TOPICS))
def test_bytes_never_crash_and_never_get_lost(value, topic):
    _check_outcome(ROUTER.route_bytes(value, topic), value)


@FUZZ
@given(event=st.one_of(mutated_events(), json_values))
def test_event_dicts_never_crash_and_never_get_lost(event):
    out = ROUTER.route_event(event)
    _check_outcome(out, None)
    if isinstance(out, Refused):
        assert out.value is not None  # something to keep in dead_letter, always


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(batch=st.lists(raw_inputs, min_size=1, max_size=25))
def test_counts_balance(batch):
    p = EventProducer(Recorder(), REGISTRY, SCHEMAS, "fuzz", max_event_bytes=4096)
    for v in batch:
        p.send_bytes(v)
    c = p.counts
    assert c.received == len(batch) == c.accepted + c.dead_lettered == len(p.producer.records)
    assert sum(r[0] == "dead_letter" for r in p.producer.records) == c.dead_lettered


def test_the_fuzzer_reaches_both_outcomes():
    """Guard against a strategy that only ever produces garbage (or only valid events)."""
    outcomes = {type(ROUTER.route_bytes(json.dumps(e).encode())).__name__ for e in VALID}
    assert outcomes == {"Accepted"}
    found = set()

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(event=mutated_events())
    def probe(event):
        found.add(type(ROUTER.route_event(event)).__name__)

    probe()
    assert found == {"Accepted", "Refused"}


LLM_STANDARD = (ROOT / "schemas/examples/llm.usage.completed/valid/standard.json").read_text()


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(cost=st.decimals(min_value=-5, max_value=5, places=12, allow_nan=False, allow_infinity=False),
       spelling=st.sampled_from(["{}", "{:e}", "{:E}", "{:f}"]))
def test_money_in_any_json_number_spelling(cost, spelling):
    """cost_usd as producers may write it (0.0038, 3.8e-05, 3.8E-5, 0.003800000000): a number
    >= 0 is accepted byte for byte, a negative one refused; the spelling never matters."""
    text = spelling.format(cost)
    value = LLM_STANDARD.replace('"cost_usd": 0.0038', f'"cost_usd": {text}').encode()
    assert json.loads(value)["data"]["cost_usd"] == float(cost)
    out = ROUTER.route_bytes(value)
    _check_outcome(out, value)
    if cost >= 0:
        assert isinstance(out, Accepted) and out.value == value, out
    else:
        assert (out.error.error_class, out.error.field) == ("schema.value", "data.cost_usd")


@pytest.mark.parametrize("value", [b"\xed\xa0\x80", b'"\\ud800"', b'{"type": "\\ud800"}'])
def test_surrogates(value):
    _check_outcome(ROUTER.route_bytes(value), value)
