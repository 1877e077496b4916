"""The consumer-group jobs: specs from consumers/, Spark sessions, offset commits, sinks.

Importing this package does not import pyspark; the parts that need it do so when called.
"""

from .process import start, status, stop
from .spec import JobSpec, Sink, SpecInvalid, list_specs, load_spec

__all__ = ["JobSpec", "Sink", "SpecInvalid", "list_specs", "load_spec", "start", "status", "stop"]
