"""Dead-letter records from refused events: original bytes as the value, provenance in headers.

Header names are the contract in hanzo_stream/dead_letter.py (the Spark jobs write the same).
A producer-side refusal was never written to Kafka, so partition and offset are -1. A value
too large even for dead_letter (past DEAD_LETTER_MAX_VALUE) keeps its first bytes plus its
size and sha256, so nothing is silently dropped and the loss is visible.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from .. import dead_letter as dl
from .envelope import iso_ms
from .router import Refused

DEAD_LETTER_MAX_VALUE = 900_000  # under the broker's 1 MB message limit, with room for headers


@dataclass(frozen=True)
class DeadLetterRecord:
    topic: str
    key: bytes
    value: bytes | None
    headers: list[tuple[str, bytes]]


def record(refused: Refused, stage: str, failed_at: str | None = None,
           partition: int = -1, offset: int = -1) -> DeadLetterRecord:
    e = refused.error
    headers = [
        (dl.H_SOURCE_TOPIC, refused.source_topic.encode()),
        (dl.H_SOURCE_PARTITION, str(partition).encode()),
        (dl.H_SOURCE_OFFSET, str(offset).encode()),
        (dl.H_ERROR_CLASS, e.error_class.encode()),
        (dl.H_ERROR_MESSAGE, e.message.encode("utf-8", "backslashreplace")),
        (dl.H_SCHEMA, e.schema.encode("utf-8", "backslashreplace")),
        (dl.H_FAILED_AT, (failed_at or iso_ms()).encode()),
        (dl.H_STAGE, stage.encode("utf-8", "backslashreplace")),
    ]
    if refused.key is not None:
        headers.append((dl.H_ORIGINAL_KEY, refused.key))
    value = refused.value
    if value is not None and len(value) > DEAD_LETTER_MAX_VALUE:
        headers += [(dl.H_TRUNCATED, b"true"), (dl.H_ORIGINAL_SIZE, str(len(value)).encode()),
                    (dl.H_ORIGINAL_SHA256, hashlib.sha256(value).hexdigest().encode())]
        value = value[:DEAD_LETTER_MAX_VALUE]
    return DeadLetterRecord(dl.TOPIC, refused.source_topic.encode(), value, headers)


def headers_dict(headers: list[tuple[str, bytes]] | None) -> dict[str, str]:
    """Headers as the stream.dead_letter schema's JSON view (name -> text)."""
    return {k: (v or b"").decode("utf-8", "replace") for k, v in headers or []}
