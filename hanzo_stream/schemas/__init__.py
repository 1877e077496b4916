"""Event schemas: loading (store), their checks (validate), the event validator the client, the
jobs and the examples check share (validator, refusals), the BACKWARD gate (compat), registry
sync (register)."""

from .store import BASE_ID, DEAD_LETTER_TYPE, ENVELOPE, ENVELOPE_ID, SchemaSet, load

__all__ = ["BASE_ID", "DEAD_LETTER_TYPE", "ENVELOPE", "ENVELOPE_ID", "SchemaSet", "load"]
