"""The dead-letter contract shared by the client library and the Spark jobs.

A dead-lettered record keeps the original value bytes as its value, the key
`source_topic` (the registry's key for dead_letter), and its provenance in headers, so a
replay tool can put it back exactly where it came from. `dead_letter_record()` is the one
place that builds such a record: the producer (hanzo_stream/client/dead_letters.py) and
the jobs (hanzo_stream/jobs/kafka_out.py) both call it, so they cannot drift apart.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

TOPIC = "dead_letter"

H_SOURCE_TOPIC = "hs.source.topic"
H_SOURCE_PARTITION = "hs.source.partition"  # decimal string; "-1" if never written to Kafka
H_SOURCE_OFFSET = "hs.source.offset"  # decimal string; "-1" if never written to Kafka
H_ERROR_CLASS = "hs.error.class"  # e.g. "json.malformed", "schema.required", "utf8.invalid"
H_ERROR_MESSAGE = "hs.error.message"  # one human sentence naming the field and the fix
H_SCHEMA = "hs.schema"  # schema id the event was checked against ("" if unknown)
H_FAILED_AT = "hs.failed.at"  # ISO 8601 UTC with milliseconds
H_STAGE = "hs.stage"  # who rejected it: "producer:<principal>" or "job:<group>"
H_ORIGINAL_KEY = "hs.original.key"  # the original key bytes, if any

ALL_HEADERS = (H_SOURCE_TOPIC, H_SOURCE_PARTITION, H_SOURCE_OFFSET, H_ERROR_CLASS,
               H_ERROR_MESSAGE, H_SCHEMA, H_FAILED_AT, H_STAGE, H_ORIGINAL_KEY)

# Only when the original value was too large for dead_letter itself and had to be cut:
# the value then holds its first bytes.
H_TRUNCATED = "hs.truncated"  # "true"
H_ORIGINAL_SIZE = "hs.original.size"  # decimal byte count of the original value
H_ORIGINAL_SHA256 = "hs.original.sha256"  # hex sha256 of the original value

# Value plus original key, in bytes. The broker takes at most message.max.bytes (Kafka's
# default 1 048 588) per record batch; this leaves ~145 KB for the other headers, so a
# record that fit its source topic always fits dead_letter too.
DEAD_LETTER_MAX_VALUE = 900_000


@dataclass(frozen=True)
class DeadLetterRecord:
    """One record for the dead_letter topic, ready for Producer.produce()."""

    topic: str
    key: bytes
    value: bytes | None
    headers: list[tuple[str, bytes]]


def _text(s: str) -> bytes:
    """Header text as UTF-8; a lone surrogate becomes `\\udXXX` instead of an exception."""
    return s.encode("utf-8", "backslashreplace")


def _fit(value: bytes | None, budget: int) -> tuple[bytes | None, list[tuple[str, bytes]]]:
    """The value cut to `budget` bytes, plus the headers that make the cut visible."""
    if value is None or len(value) <= budget:
        return value, []
    return value[:budget], [(H_TRUNCATED, b"true"), (H_ORIGINAL_SIZE, str(len(value)).encode()),
                            (H_ORIGINAL_SHA256, hashlib.sha256(value).hexdigest().encode())]


def dead_letter_record(source_topic: str, value: bytes | None, key: bytes | None, *,
                       error_class: str, error_message: str, schema: str, stage: str,
                       failed_at: str, partition: int = -1, offset: int = -1) -> DeadLetterRecord:
    """The dead_letter record for one refused input (partition/offset -1: never in Kafka).

    A value too large for dead_letter keeps its first bytes (the original key counts
    toward the same budget) with hs.truncated, hs.original.size and hs.original.sha256:
    a record too large is parked visibly, never an error that stops its producer or job.
    """
    headers = [
        (H_SOURCE_TOPIC, _text(source_topic)),
        (H_SOURCE_PARTITION, str(partition).encode()),
        (H_SOURCE_OFFSET, str(offset).encode()),
        (H_ERROR_CLASS, _text(error_class)),
        (H_ERROR_MESSAGE, _text(error_message)),
        (H_SCHEMA, _text(schema)),
        (H_FAILED_AT, _text(failed_at)),
        (H_STAGE, _text(stage)),
    ]
    if key is not None:
        headers.append((H_ORIGINAL_KEY, key))
    kept, cut = _fit(value, max(0, DEAD_LETTER_MAX_VALUE - len(key or b"")))
    return DeadLetterRecord(TOPIC, _text(source_topic), kept, headers + cut)
