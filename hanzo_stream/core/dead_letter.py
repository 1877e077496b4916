"""The dead-letter contract shared by the client library and the Spark jobs.

A dead-lettered record keeps the original value bytes as its value, the key
`source_topic` (the registry's key for dead_letter), and its provenance in headers, so a
replay tool can put it back exactly where it came from. `dead_letter_record()` is the one
place that builds such a record: the producer (hanzo_stream/client/dead_letters.py) and
the jobs (hanzo_stream/jobs/kafka_out.py) both call it, so they cannot drift apart.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
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
# Likewise when the original key was over KEY_MAX: hs.original.key holds its first bytes.
H_KEY_TRUNCATED = "hs.original.key.truncated"  # "true"
H_ORIGINAL_KEY_SIZE = "hs.original.key.size"
H_ORIGINAL_KEY_SHA256 = "hs.original.key.sha256"

# Value plus original key, in bytes. The broker takes at most message.max.bytes (Kafka's
# default 1 048 588) per record batch; this leaves ~145 KB for the other headers, so a
# record that fit its source topic always fits dead_letter too.
DEAD_LETTER_MAX_VALUE = 900_000
# What the rest may take, so that value, key and headers together always fit: a key is at most
# KEY_MAX bytes (a key near the broker's limit would otherwise make every dead letter of it too
# large, and a job fail its batch on each replay), each text header at most TEXT_MAX, the
# message at most MESSAGE_MAX (it may quote a field name as long as the event).
KEY_MAX = 64 * 1024
TEXT_MAX = 1024
MESSAGE_MAX = 4096


@dataclass(frozen=True)
class DeadLetterRecord:
    """One record for the dead_letter topic, ready for Producer.produce()."""

    topic: str
    key: bytes
    value: bytes | None
    headers: list[tuple[str, bytes]]


def _text(s: str, limit: int = TEXT_MAX) -> bytes:
    """Header text as UTF-8 (a lone surrogate becomes `\\udXXX` instead of an exception), cut
    to `limit` bytes on a character boundary with "..." when longer."""
    b = s.encode("utf-8", "backslashreplace")
    if len(b) <= limit:
        return b
    return b[:limit - 3].decode("utf-8", "ignore").encode() + b"..."


def _fit(data: bytes | None, budget: int, flags: tuple[str, str, str] = (
        H_TRUNCATED, H_ORIGINAL_SIZE, H_ORIGINAL_SHA256)) -> tuple[bytes | None, list[tuple[str, bytes]]]:
    """`data` cut to `budget` bytes, plus the headers that make the cut visible."""
    if data is None or len(data) <= budget:
        return data, []
    truncated, size, sha256 = flags
    return data[:budget], [(truncated, b"true"), (size, str(len(data)).encode()),
                           (sha256, hashlib.sha256(data).hexdigest().encode())]


def dead_letter_record(source_topic: str, value: bytes | None, key: bytes | None, *,
                       error_class: str, error_message: str, schema: str, stage: str,
                       failed_at: str, partition: int = -1, offset: int = -1) -> DeadLetterRecord:
    """The dead_letter record for one refused input (partition/offset -1: never in Kafka).

    A value too large for dead_letter keeps its first bytes (the original key counts
    toward the same budget) with hs.truncated, hs.original.size and hs.original.sha256, a key
    over KEY_MAX likewise (hs.original.key.truncated, .size, .sha256), and every text header
    is bounded: whatever the input, the record fits, so it is parked visibly, never an error
    that stops its producer or job.
    """
    headers = [
        (H_SOURCE_TOPIC, _text(source_topic)),
        (H_SOURCE_PARTITION, str(partition).encode()),
        (H_SOURCE_OFFSET, str(offset).encode()),
        (H_ERROR_CLASS, _text(error_class)),
        (H_ERROR_MESSAGE, _text(error_message, MESSAGE_MAX)),
        (H_SCHEMA, _text(schema)),
        (H_FAILED_AT, _text(failed_at)),
        (H_STAGE, _text(stage)),
    ]
    key, key_cut = _fit(key, KEY_MAX, (H_KEY_TRUNCATED, H_ORIGINAL_KEY_SIZE, H_ORIGINAL_KEY_SHA256))
    if key is not None:
        headers.append((H_ORIGINAL_KEY, key))
    kept, cut = _fit(value, max(0, DEAD_LETTER_MAX_VALUE - len(key or b"")))
    return DeadLetterRecord(TOPIC, _text(source_topic), kept, headers + key_cut + cut)


def identity(headers: Mapping[str, bytes], value: bytes | None) -> str:
    """What makes two dead letters one failure, for readers that must count it once.

    Writing a dead letter is at least once: a job's batch replayed after a crash writes its
    letters again (with a new failed-at), and a resend after a timeout, by the application or
    by librdkafka re-writing a batch, may land beside a copy that was written after all. A
    letter a job wrote names the record it refused (source topic, partition, offset) and the
    stage; one a producer wrote has no offset (the record never reached Kafka) and each of
    its copies is the same bytes, so its stage, failed-at and value name it.
    """
    def h(name: str) -> bytes:
        return headers.get(name) or b""

    offset = h(H_SOURCE_OFFSET)
    if offset.lstrip(b"-").isdigit() and int(offset) >= 0:
        parts = [h(H_STAGE), h(H_SOURCE_TOPIC), h(H_SOURCE_PARTITION), offset]
    else:
        digest = h(H_ORIGINAL_SHA256) or hashlib.sha256(value or b"").hexdigest().encode()
        parts = [h(H_STAGE), h(H_SOURCE_TOPIC), h(H_FAILED_AT), digest,
                 h(H_ORIGINAL_KEY_SHA256) or hashlib.sha256(h(H_ORIGINAL_KEY)).hexdigest().encode()]
    return hashlib.sha256(b"\x00".join(parts)).hexdigest()[:32]
