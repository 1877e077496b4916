"""Search what the platform writes for its secrets, in every form a leak could take.

A password may leak as itself, base64 (at any of the three alignments a longer string puts
it in, standard or URL-safe alphabet) or hex; a private key by any line of its PEM body or
its DER bytes. Reports name the secret ("password of llm-gateway"), never its value.

One pass per file: a leak needs a run of at least MIN_RUN base64/URL-safe/hex characters,
so each file's runs that long are gathered (one C-speed pass) and the needles are
searched in those. Compressed data (Kafka's lz4 batches, Prometheus chunks, Parquet pages)
is scanned as stored, not decompressed.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

MIN_RUN = 16
_RUN_CHARS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-"
# Every other byte becomes a space, so bytes.split() cuts the runs out at C speed: 1.4x the
# regex `[A-Za-z0-9+/=_-]{16,}` on 750 MB of mixed files, which tried each start inside a word.
_TO_RUNS = bytes(b if b in _RUN_CHARS else 0x20 for b in range(256))


@dataclass(frozen=True)
class Secret:
    label: str  # what it is, printable: never the value
    needles: tuple[bytes, ...]  # text forms (found inside runs)
    binary: tuple[bytes, ...] = ()  # raw forms (searched in the whole file)


def _base64_cores(raw: bytes) -> list[bytes]:
    """The part of base64(x + raw + y) that is the same whatever x and y are."""
    out = []
    for shift in range(3):
        enc = base64.b64encode(b"\0" * shift + raw)
        start = -(-shift * 4 // 3)  # first char whose 6 bits all come from raw
        core = enc[start:len(enc) - 4]  # the last ones may mix with what follows
        out += [core, core.translate(bytes.maketrans(b"+/", b"-_"))]
    return [c for c in out if len(c) >= MIN_RUN]


def password(label: str, value: str) -> Secret:
    raw = value.encode()
    hexed = raw.hex().encode()
    return Secret(label, (raw, hexed, hexed.upper(), *_base64_cores(raw)))


def private_key(label: str, pem: str) -> Secret:
    body = [line for line in pem.split("-----")[2].split() if len(line) >= MIN_RUN]
    der = base64.b64decode("".join(body))
    return Secret(label, tuple(line.encode() for line in body), (der,))


def from_value(label: str, value: str) -> Secret:
    return private_key(label, value) if "PRIVATE KEY-----" in value else password(label, value)


def private_keys_in(label: str, pem_file: Path) -> list[Secret]:
    """Every private key block in a PEM file (a keystore holds the key and its chain)."""
    text = pem_file.read_text()
    blocks = re.findall(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----",
                        text, re.S)
    return [private_key(f"{label} #{i}" if i else label, b) for i, b in enumerate(blocks)]


def found(data: bytes, secrets: Iterable[Secret]) -> list[str]:
    """Labels of the secrets `data` contains in any form."""
    runs = b"\n".join({r for r in data.translate(_TO_RUNS).split() if len(r) >= MIN_RUN})
    return [s.label for s in secrets
            if any(n in runs for n in s.needles) or any(b in data for b in s.binary)]


# Kafka's offset and time indexes hold fixed-width (offset, position) and (timestamp, offset)
# entries, never record bytes, and a running broker preallocates 10 MB of each per partition
# (about 2 GB for the platform's ~95 partitions): skipped.
NUMBERS_ONLY = (".index", ".timeindex")


def files_under(root: Path) -> Iterator[Path]:
    """Every file under root. The platform runs on while this walks it: a directory that
    vanishes meanwhile (chDB merges parts away; Path.rglob raised FileNotFoundError on one)
    is passed over, as os.walk does, and so is a file gone before it is read (the caller)."""
    found = [Path(d, n) for d, _, names in os.walk(root) for n in names]
    for p in sorted(found):
        if p.is_file() and not p.is_symlink() and p.suffix not in NUMBERS_ONLY:
            yield p
