"""The record key: the registry's key field for the topic, from the envelope, else from data.

team_id and org_id live on the envelope, agent_id inside data (agent RPC metering). A key
that is missing, empty or not a string is an error: a null key would scatter one team's
events over partitions (librdkafka picks a random partition) and break their order.
"""

from __future__ import annotations

from typing import Any

from . import refusals as R
from .refusals import Invalid


def key_value(event: dict[str, Any], field: str) -> Any:
    if field in event:
        return event[field]
    data = event.get("data")
    return data.get(field) if isinstance(data, dict) else None


def key_for(event: dict[str, Any], field: str, topic: str, schema: str = "") -> bytes | Invalid:
    """The key bytes, or why there are none."""
    v = key_value(event, field)
    if v is None or v == "":
        return R.KEY_MISSING.invalid(field, schema, field=field, topic=topic)
    if not isinstance(v, str):
        return R.KEY_NOT_STRING.invalid(field, schema, field=field, topic=topic, got=type(v).__name__)
    try:
        return v.encode("utf-8")
    except UnicodeEncodeError:
        return R.KEY_SURROGATE.invalid(field, schema, field=field)
