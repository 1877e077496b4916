"""The record key: the registry's key field for the topic, from the envelope, else from data.

team_id and org_id live on the envelope, agent_id inside data (agent RPC metering). A key
that is missing, empty or not a string is an error: a null key would scatter one team's
events over partitions (librdkafka picks a random partition) and break their order.
"""

from __future__ import annotations

from typing import Any

from .validator import Invalid


def key_value(event: dict[str, Any], field: str) -> Any:
    if field in event:
        return event[field]
    data = event.get("data")
    return data.get(field) if isinstance(data, dict) else None


def key_for(event: dict[str, Any], field: str, topic: str, schema: str = "") -> bytes | Invalid:
    """The key bytes, or why there are none."""
    v = key_value(event, field)
    if v is None or v == "":
        return Invalid("key.missing", field,
                       f"`{field}` is missing or empty; it is the key of topic {topic} (events of one "
                       f"{field} stay in order on one partition): set it on the envelope or in data",
                       schema)
    if not isinstance(v, str):
        return Invalid("key.invalid", field, f"`{field}` must be a string to key topic {topic}, got "
                       f"{type(v).__name__}", schema)
    try:
        return v.encode("utf-8")
    except UnicodeEncodeError:
        return Invalid("key.invalid", field, f"`{field}` holds an unpaired UTF-16 surrogate escape; "
                       "send the key as valid Unicode text", schema)
