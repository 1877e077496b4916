"""Build hanzo.stream.v1 envelopes: a time-ordered id and a UTC millisecond timestamp.

Ids are UUIDv7 (RFC 9562): 48 bits of Unix milliseconds then random bits, so ids sort by
creation time and index well, and every language has a generator. Python 3.11 has no
uuid7, hence the few lines below.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import Any

from ..schemas.store import ENVELOPE


def new_id(ms: int | None = None) -> str:
    """A UUIDv7 string; `ms` fixes the time part (tests, deterministic replays)."""
    ms = time.time_ns() // 1_000_000 if ms is None else ms
    r = int.from_bytes(os.urandom(10), "big")
    rand_a = r >> 68  # 12 bits
    rand_b = r & ((1 << 62) - 1)
    value = (ms & 0xFFFF_FFFF_FFFF) << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def iso_ms(when: datetime | int | None = None) -> str:
    """ISO 8601 UTC with exactly milliseconds and Z: 2026-11-22T10:00:00.123Z. `when`: an
    aware datetime, epoch milliseconds (a Kafka timestamp), or None for now. The one place
    the standard's timestamp is written."""
    if isinstance(when, int):
        when = datetime.fromtimestamp(when // 1000, UTC).replace(microsecond=when % 1000 * 1000)
    when = datetime.now(UTC) if when is None else when
    if when.tzinfo is None:
        raise ValueError("naive datetime: pass an aware datetime (e.g. datetime.now(UTC))")
    when = when.astimezone(UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def build(event_type: str, source: str, data: dict[str, Any], *, team_id: str | None = None,
          org_id: str | None = None, timestamp: datetime | str | None = None,
          id: str | None = None) -> dict[str, Any]:
    """An envelope dict; validation happens when it is produced, not here."""
    event: dict[str, Any] = {
        "schema": ENVELOPE,
        "id": id or new_id(),
        "type": event_type,
        "source": source,
        "timestamp": timestamp if isinstance(timestamp, str) else iso_ms(timestamp),
    }
    if team_id is not None:
        event["team_id"] = team_id
    if org_id is not None:
        event["org_id"] = org_id
    event["data"] = data
    return event
