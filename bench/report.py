"""Write one section of docs/benchmarks.md, leaving every other section as it is."""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
from pathlib import Path

# Every bench script imports this module first. Benchmarks measure the JVMs as production runs
# them, with C2 (the local platform's quick C1-only JIT is for starting: hanzo_stream/artifacts/jvm.py).
os.environ.setdefault("HANZO_STREAM_LOCAL_JIT", "full")

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
HEADER = ("# Benchmarks\n\nEach section is written by its script under `bench/`; numbers come from "
          "one run on a shared 2-core machine, so compare ratios measured side by side, not "
          "absolute numbers across sections.\n")


def write_section(title: str, body: str, doc: Path = DOC, header: str = HEADER) -> None:
    text = doc.read_text() if doc.exists() else header
    stamp = f"_{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}_\n\n"
    section = f"## {title}\n\n{stamp}{body.rstrip()}\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = pattern.sub(lambda _: section + "\n", text) if pattern.search(text) else \
        text.rstrip() + "\n\n" + section
    doc.parent.mkdir(exist_ok=True)
    doc.write_text(text)
