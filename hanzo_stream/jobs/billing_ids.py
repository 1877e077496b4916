"""Deterministic identities of hourly billing events (the Python reference of the job's SQL).

billing_id = hex sha256 of "team_id|org_id|window_start" (window_start as ISO 8601 UTC with
milliseconds). The envelope id is a UUIDv7 whose 48-bit time is the window end (the event's
timestamp) and whose other 74 bits come from billing_id, so every re-emission of a window
carries the same id and downstream upserts and deduplication are exact.
"""

from __future__ import annotations

import hashlib
import uuid


def billing_id(team_id: str, org_id: str, window_start_iso: str) -> str:
    return hashlib.sha256(f"{team_id}|{org_id}|{window_start_iso}".encode()).hexdigest()


def event_id(billing_id_hex: str, window_end_ms: int) -> str:
    h = billing_id_hex
    variant = format((int(h[3], 16) & 0x3) | 0x8, "x")
    text = f"{window_end_ms:012x}7{h[0:3]}{variant}{h[4:7]}{h[7:19]}"
    return str(uuid.UUID(text))
