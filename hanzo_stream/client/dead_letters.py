"""Dead-letter records from refused events: original bytes as the value, provenance in headers.

The record itself is built by hanzo_stream/core/dead_letter.py, shared with the Spark jobs.
A producer-side refusal was never written to Kafka, so partition and offset are -1. A value
too large even for dead_letter (past DEAD_LETTER_MAX_VALUE) keeps its first bytes plus its
size and sha256, so nothing is silently dropped and the loss is visible.
"""

from __future__ import annotations

from ..core.dead_letter import DEAD_LETTER_MAX_VALUE, DeadLetterRecord, dead_letter_record
from .envelope import iso_ms
from .router import Refused

__all__ = ["DEAD_LETTER_MAX_VALUE", "DeadLetterRecord", "headers_dict", "record"]


def record(refused: Refused, stage: str, failed_at: str | None = None,
           partition: int = -1, offset: int = -1) -> DeadLetterRecord:
    """The dead_letter record for an event the producer refused."""
    e = refused.error
    return dead_letter_record(refused.source_topic, refused.value, refused.key,
                              partition=partition, offset=offset, error_class=e.error_class,
                              error_message=e.message, schema=e.schema, stage=stage,
                              failed_at=failed_at or iso_ms())


def headers_dict(headers: list[tuple[str, bytes]] | None) -> dict[str, str]:
    """Headers as the stream.dead_letter schema's JSON view (name -> text)."""
    return {k: (v or b"").decode("utf-8", "replace") for k, v in headers or []}
