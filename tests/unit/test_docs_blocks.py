"""Every shell and Python block of README.md and docs/ is run by a test as written, or says why
it cannot run here (tests/docs_blocks.py). A new block with neither fails here, naming it."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from tests import docs_blocks

TESTS = Path(__file__).resolve().parents[1]


def test_every_block_is_run_or_says_why_not():
    unmarked = [str(b) for b in docs_blocks.blocks() if (b.id is None) == (b.not_here is None)]
    assert not unmarked, ("give each block an id= that a test runs, or not-here=\"why\" (one of "
                          "the two): " + ", ".join(unmarked))


def test_every_block_id_is_run_by_a_test():
    sources = {p: p.read_text() for p in TESTS.rglob("*.py")}
    ids = [b for b in docs_blocks.blocks() if b.id]
    assert len({(b.page, b.id) for b in ids}) == len(ids), "an id used twice on one page"
    unrun = [f"{b} id={b.id}" for b in ids
             if not any(Path(b.page).name in src and f'"{b.id}"' in src for src in sources.values())]
    assert not unrun, f"no test runs these blocks (page name and id in one test file): {unrun}"


def test_the_count_of_blocks_run_and_not_here():
    """Printed for the notes; the not-here reasons are what is left to make runnable."""
    every = docs_blocks.blocks()
    ran = [b for b in every if b.id]
    reasons = Counter(b.not_here for b in every if b.not_here)
    print(f"\n{len(every)} blocks: {len(ran)} run by tests, {sum(reasons.values())} not here")
    for why, n in reasons.most_common():
        print(f"  {n:3}  {why}")
    assert len(every) == len(ran) + sum(reasons.values()) and len(ran) > 0
    said = " ".join((docs_blocks.ROOT / "docs" / "testing.md").read_text().split())
    assert f"{len(every)} blocks, {len(ran)} run, {sum(reasons.values())} not here" in said, (
        "docs/testing.md quotes other counts: update it")


def test_adding_a_topics_validate_runs_as_written():
    """Step 3 of docs/adding-a-topic.md, no cluster needed: exit 0 and the registry's summary."""
    res = docs_blocks.run("docs/adding-a-topic.md", ["validate"], dict(os.environ))
    assert res.stdout.startswith("ok topics.yaml:"), res.stdout
