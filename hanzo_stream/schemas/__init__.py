"""Event schemas: loading (store), the BACKWARD gate (compat), registry sync (register)."""

from .store import BASE_ID, DEAD_LETTER_TYPE, ENVELOPE, ENVELOPE_ID, SchemaSet, load

__all__ = ["BASE_ID", "DEAD_LETTER_TYPE", "ENVELOPE", "ENVELOPE_ID", "SchemaSet", "load"]
