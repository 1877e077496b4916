"""Every pointer from the docs into the code leads somewhere: a reader who follows
"`hanzo_stream/core/secret_files.py` `write_secret`" finds that file and that name in it.

Pointers are the forms the docs use: `path.py`, `path.py:name`, `path.py` `name` and
`path.py`'s `name`. A path with a folder is read from the repository root or from
hanzo_stream/; a bare file name (written where the page already said which folder) must name a
file somewhere in the repository; Kafka's own scripts (`kafka-topics.sh`) are not ours. Names
are looked up as a def, a class or an assignment.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
POINTER = re.compile(r"`([\w./-]+\.(?:py|sh))(?::(\w+))?`(?:'s)?(?:\s+`([A-Za-z_][\w.]*)(?:\(\))?`)?")
SKIP = {".git", ".venv", ".hanzo-stream", "node_modules"}


@cache
def files_named(name: str) -> tuple[Path, ...]:
    return tuple(p for p in ROOT.rglob(name) if not SKIP & set(p.relative_to(ROOT).parts))


def resolve(path: str) -> list[Path]:
    if "/" not in path:
        return list(files_named(path))
    return [f for f in (ROOT / path, ROOT / "hanzo_stream" / path) if f.is_file()]


def defines(f: Path, name: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b|^\s*{name}\s*[:=]|^{name}\(\)",
                     f.read_text(errors="replace"), re.M) is not None


def pointers() -> list[tuple[str, str, str | None]]:
    out = []
    for page in PAGES:
        for m in POINTER.finditer(page.read_text()):
            if m.group(1).startswith("kafka-"):
                continue
            name = m.group(2) or m.group(3)
            out.append((str(page.relative_to(ROOT)), m.group(1), name.split(".")[-1] if name else None))
    return out


def test_the_docs_point_into_the_code():
    assert len(pointers()) > 100  # the pattern still finds the docs' pointers


@pytest.mark.parametrize("page", [str(p.relative_to(ROOT)) for p in PAGES])
def test_every_pointer_of_a_page_leads_to_its_file_and_name(page):
    broken = []
    for where, path, name in pointers():
        if where != page:
            continue
        found = resolve(path)
        if not found:
            broken.append(f"`{path}`: no such file (from the root or hanzo_stream/)")
        elif name and not any(defines(f, name) for f in found):
            broken.append(f"`{path}` `{name}`: {name} is not defined there")
    assert not broken, f"{page}: fix or remove these pointers:\n  " + "\n  ".join(broken)
