"""Every HANZO_STREAM_* variable in the code is in hanzo_stream/core/environment.py's table, and
docs/environment.md is that table."""

from __future__ import annotations

import re
from pathlib import Path

from hanzo_stream.core import environment

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("hanzo_stream", "infra", "spark", "consumers", "bench", "tests", ".ci")
NAME = re.compile(r"(?<![A-Z0-9_])HANZO_STREAM_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_]*\{)")


def names_in_code() -> dict[str, str]:
    found: dict[str, str] = {}
    files = [p for d in SCANNED for p in (ROOT / d).rglob("*")
             if p.suffix in (".py", ".sh", ".yaml", ".yml", "") and p.is_file()]
    files += [ROOT / "dev", ROOT / "README.md"]
    for p in files:
        if p.resolve() == Path(environment.__file__).resolve():
            continue
        try:
            text = p.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        for n in NAME.findall(text):
            found.setdefault(n, str(p.relative_to(ROOT)))
    return found


def test_every_variable_the_code_names_is_in_the_table():
    found = names_in_code()
    assert len(found) >= 25
    missing = {n: where for n, where in found.items() if not environment.covers(n)}
    assert not missing, f"add to hanzo_stream/core/environment.py: {missing}"


def test_the_table_lists_nothing_the_code_does_not_name():
    found = names_in_code()
    stale = [v.name for v in environment.VARIABLES
             if not any(environment.listed_as(v, n) for n in found)]
    assert not stale, stale


def test_the_page_is_the_table():
    assert environment.DOC.read_text() == environment.render(), \
        "regenerate: python -m hanzo_stream.core.environment"
