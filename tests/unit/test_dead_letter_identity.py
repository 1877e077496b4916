"""One failure, one identity: what readers of dead_letter deduplicate by (the monitor, replay)."""

from __future__ import annotations

from hanzo_stream.core import dead_letter as dl
from hanzo_stream.monitoring.dead_letter_monitor import Seen


def letter(*, stage="job:audit-archive", at="2026-11-27T10:00:00.000Z", partition=3, offset=42,
           value=b'{"broken": true}', key=b"org-1", topic="audit_log"):
    r = dl.dead_letter_record(topic, value, key, error_class="schema.required",
                              error_message="`x` is required; add it", schema="", stage=stage,
                              failed_at=at, partition=partition, offset=offset)
    return dl.identity(dict(r.headers), r.value)


def test_a_job_letter_written_again_by_a_replayed_batch_is_the_same_failure():
    assert letter(at="2026-11-27T10:00:00.000Z") == letter(at="2026-11-27T10:05:00.000Z")
    assert letter(offset=42) != letter(offset=43)
    assert letter(partition=3) != letter(partition=4)
    # the same record refused by two groups is two failures
    assert letter(stage="job:audit-archive") != letter(stage="job:analytics-ingest")


def test_a_producer_letter_is_named_by_its_bytes_and_time():
    producer = {"stage": "producer:iam-service", "partition": -1, "offset": -1}
    assert letter(**producer) == letter(**producer)  # a resend of the same record
    assert letter(**producer, at="2026-11-27T10:00:01.000Z") != letter(**producer)  # refused again
    assert letter(**producer, value=b"{}") != letter(**producer)
    assert letter(**producer, key=b"org-2") != letter(**producer)


def test_a_huge_value_is_named_by_its_whole_digest_not_the_kept_prefix():
    producer = {"stage": "producer:iam-service", "partition": -1, "offset": -1}
    big = b"x" * (dl.DEAD_LETTER_MAX_VALUE + 10)
    assert letter(**producer, value=big) != letter(**producer, value=big[:-1] + b"y")


def test_seen_counts_a_copy_once_and_forgets_the_oldest_past_its_limit():
    seen = Seen(limit=2)
    assert [seen.first(x) for x in "aab"] == [True, False, True]
    seen.first("c")  # a is the oldest: forgotten
    assert seen.first("a") is True and seen.first("c") is False
