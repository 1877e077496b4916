"""The dead-letter contract shared by the client library and the Spark jobs.

A dead-lettered record keeps the original value bytes untouched as its value, the key
`source_topic` (the registry's key for dead_letter), and its provenance in headers, so a
replay tool can put it back exactly where it came from.
"""

from __future__ import annotations

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

# Only when the original value was too large for dead_letter itself and had to be cut
# (see hanzo_stream/client/dead_letters.py): the value then holds its first bytes.
H_TRUNCATED = "hs.truncated"  # "true"
H_ORIGINAL_SIZE = "hs.original.size"  # decimal byte count of the original value
H_ORIGINAL_SHA256 = "hs.original.sha256"  # hex sha256 of the original value
