"""The docs' shell and Python blocks, for the tests that run them as written.

Every such block in README.md and docs/ says what happens to it in its info string:

    ```bash id=describe          run by a test, which finds it by page and id
    ```sh not-here="why"         cannot run on this machine (tests/unit/test_docs_blocks.py
                                 counts these, with their reasons)

A block inside a list item is indented; it is read dedented, as a reader pastes it.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LANGS = {"sh", "bash", "shell", "console", "python"}
FENCE = re.compile(r"^( *)```(\w+)([^\n]*)\n(.*?)^\1```", re.S | re.M)


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    line: int
    lang: str
    id: str | None
    not_here: str | None
    text: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(page: Path | None = None) -> list[Block]:
    out = []
    for p in [page] if page else pages():
        text = p.read_text()
        for m in FENCE.finditer(text):
            if m.group(2) not in LANGS:
                continue
            info = dict(shlex.split(kv)[0].split("=", 1) for kv in
                        re.findall(r'[\w-]+=(?:"[^"]*"|\S+)', m.group(3)))
            out.append(Block(str(p.relative_to(ROOT)), text[:m.start()].count("\n") + 1, m.group(2),
                             info.get("id"), info.get("not-here"), textwrap.dedent(m.group(4))))
    return out


def block(page: str, block_id: str) -> str:
    found = [b for b in blocks(ROOT / page) if b.id == block_id]
    assert len(found) == 1, f"{page} has {len(found)} blocks with id={block_id}"
    return found[0].text


def run(page: str, block_ids: list[str], env: Mapping[str, str], cwd: Path = ROOT,
        timeout: float = 300, then: str = "") -> subprocess.CompletedProcess:
    """The blocks, in one bash with `set -euo pipefail`, as a reader pastes them one after the
    other; the CLI is on PATH (the Python that runs the tests). `then`: the test's own look at
    the shell afterwards. Fails with both outputs."""
    script = "set -euo pipefail\n" + "".join(block(page, b) for b in block_ids) + then
    full_env = {**env, "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', os.environ['PATH'])}"}
    res = subprocess.run(["bash", "-c", script], env=full_env, capture_output=True, text=True,
                         timeout=timeout, cwd=cwd)
    assert res.returncode == 0, f"{page} {block_ids} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}"
    return res
