"""The Python client every service uses: envelopes, validation, keying, produce, consume, and
its dead letters: parked when an event cannot be sent (dead_letters), put back, each judged
first, by `hanzo-stream dead-letters replay` (replay).

See docs/client.md. The pieces are importable on their own (router, keying, and the validator,
which lives with the schemas it checks: schemas/validator.py) so other tools reuse them without
a broker.
"""

from ..schemas.validator import Invalid, Validator
from .consumer import UnknownGroup, make_consumer
from .envelope import build, iso_ms, new_id
from .producer import STANDARD_SETTINGS, EventProducer, make_producer
from .router import Accepted, Refused, Router

__all__ = ["STANDARD_SETTINGS", "Accepted", "EventProducer", "Invalid", "Refused", "Router",
           "UnknownGroup", "Validator", "build", "iso_ms", "make_consumer", "make_producer", "new_id"]
