"""Where the local platform keeps its state and where downloads are cached."""

from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    """Per-checkout state (data, logs, certificates, credentials): HANZO_STREAM_HOME or ./.hanzo-stream."""
    return Path(os.environ.get("HANZO_STREAM_HOME", ".hanzo-stream")).resolve()


def cache_dir() -> Path:
    """Downloads shared by every checkout (jars, Go tools): survives `local down --purge`."""
    base = os.environ.get("HANZO_STREAM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "hanzo-stream")
    return Path(base)
