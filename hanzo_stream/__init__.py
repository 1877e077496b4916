"""Hanzo Stream: the event streaming backbone, as code."""

__version__ = "0.1.0"
