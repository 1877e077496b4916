"""Deterministic identities of window records (the Python reference of the engine's SQL).

billing_id / settlement_id = hex sha256 of the record's `by` values and its window start
(ISO 8601 UTC with milliseconds) joined by "|": "team_id|org_id|window_start" for billing-agg,
"agent_id|window_start" for rpc-billing. The envelope id is a UUIDv7 whose 48-bit time is the
window end (the event's timestamp) and whose other 74 bits come from that digest, so every
re-emission of a window carries the same id and downstream upserts and deduplication are exact.
"""

from __future__ import annotations

import hashlib
import uuid


def billing_id(*parts: str) -> str:
    """sha256 of the `by` values then the window start, e.g. (team_id, org_id, window_start)."""
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


settlement_id = billing_id  # rpc-billing's name for the same digest: (agent_id, window_start)


def event_id(billing_id_hex: str, window_end_ms: int) -> str:
    h = billing_id_hex
    variant = format((int(h[3], 16) & 0x3) | 0x8, "x")
    text = f"{window_end_ms:012x}7{h[0:3]}{variant}{h[4:7]}{h[7:19]}"
    return str(uuid.UUID(text))
