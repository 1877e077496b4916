"""Files that hold a secret: written whole, 0600 from the first byte, never through a link.

Shared by the local platform (passwords, keys, broker properties) and the brokers' own
keystore reload (tls_reload), which runs in a Kubernetes pod with no local platform around it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_secret(path: Path, text: str | bytes) -> None:
    """A file only its owner can read, created that way (never readable by others for a moment)
    and whole: written to a new 0600 file beside it (mkstemp: O_EXCL, so never through a link
    someone planted), then renamed over it, so a reader sees the old file or the new one and a
    symbolic link at `path` is replaced, not written through."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode() if isinstance(text, str) else text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
