"""Dead-letter replay judges each letter before writing (hanzo_stream/client/replay.py): a letter any
principal could have written cannot plant a record in a topic its writer does not produce."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hanzo_stream.client import envelope
from hanzo_stream.client.replay import MISSING, Letter, judge, judge_all
from hanzo_stream.client.router import Router
from hanzo_stream.core import dead_letter as dl
from hanzo_stream.schemas.store import load
from hanzo_stream.schemas.validator import Validator

ROOT = Path(__file__).resolve().parents[2]
EVENT = envelope.build("llm.usage.completed", "llm-gateway", {
    "request_id": "r-1", "model": "zen-72b", "provider": "together", "prompt_tokens": 10,
    "completion_tokens": 5, "total_tokens": 15, "cost_usd": 0.000042}, team_id="team_1", org_id="org_1")
VALUE = json.dumps(EVENT).encode()
SOURCE = {("llm_usage", 1, 42): VALUE}  # what the source topics hold (topic, partition, offset)
PASSWORDS = {"llm-gateway": "x"}


@pytest.fixture(scope="module")
def router(registry) -> Router:
    return Router(registry, Validator(load(ROOT / "schemas")))


def letter(source="llm_usage", stage="producer:llm-gateway", value=VALUE, **extra: bytes) -> Letter:
    h = {dl.H_SOURCE_TOPIC: source.encode(), dl.H_STAGE: stage.encode(),
         dl.H_ERROR_CLASS: b"schema.required", dl.H_SOURCE_PARTITION: b"-1", dl.H_SOURCE_OFFSET: b"-1"}
    return Letter(7, value, h | extra)


def verdict(router, registry, x: Letter, passwords=PASSWORDS):
    return judge(x, registry, router, lambda t, p, o: SOURCE.get((t, p, o), MISSING), passwords)


def test_a_producers_own_refusal_that_now_passes_is_replayed_as_that_producer(router, registry):
    v = verdict(router, registry, letter())
    assert v.refused is None and v.writer == "llm-gateway"
    assert (v.accepted.topic, v.accepted.key, v.accepted.value) == ("llm_usage", b"team_1", VALUE)


@pytest.mark.parametrize("x, reason", [
    # the attack: a service parks a "billing" record, hoping a replay writes it for it
    (letter(source="billing_events"), "does not produce billing_events"),
    (letter(source="audit_log", stage="producer:llm-gateway"), "does not produce audit_log"),
    (letter(stage="producer:admin"), "admin does not produce"),
    (letter(source="dead_letter"), "not a topic of the registry"),
    (letter(source="no_such_topic"), "not a topic of the registry"),
    (letter(stage="job:audit-archive"), "no group audit-archive reads llm_usage"),
    (letter(stage="job:billing-agg"), "without the source record's partition"),
    (letter(stage="job:billing-agg", **{dl.H_SOURCE_PARTITION: b"1", dl.H_SOURCE_OFFSET: b"43"}),
     "does not exist"),
    (letter(stage="job:billing-agg", value=VALUE + b" ",
            **{dl.H_SOURCE_PARTITION: b"1", dl.H_SOURCE_OFFSET: b"42"}), "different bytes"),
    (letter(stage="anyone"), "neither producer"),
    # a claim of the right producer, on a protected topic: a person recognises it first
    (letter(source="billing_events", stage="producer:billing-aggregator"), "--include-protected"),
    (letter(value=b'{"nope": 1}'), "still refused: schema.required"),
    (letter(**{dl.H_TRUNCATED: b"true"}), "cut to fit"),
])
def test_implausible_or_still_invalid_letters_are_refused(router, registry, x, reason):
    v = verdict(router, registry, x)
    assert v.accepted is None and reason in v.refused, v.refused


def test_a_job_letter_whose_record_is_still_there_is_replayed_as_a_producer(router, registry):
    x = letter(stage="job:billing-agg", **{dl.H_SOURCE_PARTITION: b"1", dl.H_SOURCE_OFFSET: b"42"})
    v = verdict(router, registry, x)
    assert v.refused is None and v.writer == "llm-gateway"


def test_without_a_producers_password_nothing_is_written_as_the_admin(router, registry):
    v = verdict(router, registry, letter(), passwords={"admin": "root"})
    assert v.accepted is None and "never writes as the admin" in v.refused


def test_each_failure_and_each_event_is_replayed_once(router, registry):
    """Writing dead letters is at least once: the same letter twice (a replayed batch: a new
    failed-at, the same source offset), a byte-identical resend, or two letters for one event
    id (refused, resent with the same id, refused again) are replayed once."""
    job = {dl.H_SOURCE_PARTITION: b"1", dl.H_SOURCE_OFFSET: b"42"}
    at = {dl.H_FAILED_AT: b"2026-11-27T10:00:00.000Z"}
    letters = [
        Letter(10, VALUE, letter(stage="job:billing-agg", **job, **at).headers),
        Letter(11, VALUE, letter(stage="job:billing-agg", **job,
                                 **{dl.H_FAILED_AT: b"2026-11-27T10:05:00.000Z"}).headers),
        Letter(12, VALUE, letter(**at).headers),  # the producer's own letter for the same event
        Letter(13, VALUE, letter(**at).headers),  # ... and its byte-identical resend
    ]
    other = json.dumps(envelope.build("llm.usage.completed", "llm-gateway", EVENT["data"],
                                      team_id="team_1", org_id="org_1")).encode()
    letters.append(Letter(14, other, letter(value=other, **at).headers))
    verdicts = judge_all(letters, registry, router,
                         lambda t, p, o: SOURCE.get((t, p, o), MISSING), PASSWORDS)
    assert [(v.letter.offset, v.copy_of, v.refused) for v in verdicts] == [
        (10, None, None), (11, 10, None), (12, 10, None), (13, 10, None), (14, None, None)]
    assert [v.letter.offset for v in verdicts if v.accepted] == [10, 14]
