"""Patterns that cannot backtrack for long: a schema's `pattern` is refused when a crafted
value could make a backtracking engine (Python's `re` in the client, Java's in the jobs) take
time that grows faster than the value's length.

A regular expression backtracks badly when two parts of it can match the same characters, so
a failing match tries every way of splitting the input between them. The shapes refused here
(the ones that cause it, after OWASP's and regexploit's catalogues):

- a repeat whose body may or may not end with what the body can start with: `(a+)+`,
  `(\\w+\\s?)*`, `(a|aa)*` (exponential);
- a repeat of alternatives that can start with the same character: `(a|ab)*` (exponential);
- an unbounded repeat followed, with only what it could match itself or nothing in between,
  by another that can start with one of its characters: `\\d+\\d+`, `[^@]+\\.[^@]+` (the
  email pattern this rule was written for: 16 KB took seconds), `a+\\.?a+` (polynomial);
- an unbounded repeat in a pattern not anchored with `^` (the engine retries at each position).

The sets of characters are compared on a sample alphabet (Latin-1 and a few others), which is
enough for the classes schemas use. tests/unit/test_patterns.py times both engines on the
shapes, so the rule stays tied to real backtracking.
"""

from __future__ import annotations

import re
from re import _constants as C  # type: ignore[attr-defined]
from re import _parser as P  # type: ignore[attr-defined]
from typing import Any

SAMPLES = [chr(i) for i in range(0x180)] + ["\u2028", "\u4e2d", "\U0001F600"]
UNBOUNDED = 64  # a repeat allowing more than this counts as unbounded
_CATEGORY = {c: re.compile(p) for c, p in (
    (C.CATEGORY_DIGIT, r"\d"), (C.CATEGORY_NOT_DIGIT, r"\D"), (C.CATEGORY_SPACE, r"\s"),
    (C.CATEGORY_NOT_SPACE, r"\S"), (C.CATEGORY_WORD, r"\w"), (C.CATEGORY_NOT_WORD, r"\W"))}
REPEATS = (C.MAX_REPEAT, C.MIN_REPEAT)
Item = tuple[Any, Any]


def _in_class(c: str, items: list) -> bool:
    negate, hit = False, False
    for op, av in items:
        if op is C.NEGATE:
            negate = True
        elif op is C.LITERAL:
            hit |= c == chr(av)
        elif op is C.RANGE:
            hit |= av[0] <= ord(c) <= av[1]
        elif op is C.CATEGORY:
            hit |= bool(_CATEGORY[av].fullmatch(c)) if av in _CATEGORY else True
        else:
            hit = True  # anything else: assume it may match (cautious)
    return hit != negate


def _chars(item: Item) -> frozenset[str]:
    """Every sample character the item can match anywhere in it."""
    op, av = item
    if op is C.LITERAL:
        return frozenset({chr(av)})
    if op is C.NOT_LITERAL:
        return frozenset(c for c in SAMPLES if c != chr(av))
    if op is C.ANY:
        return frozenset(c for c in SAMPLES if c != "\n")
    if op is C.IN:
        return frozenset(c for c in SAMPLES if _in_class(c, av))
    if op is C.CATEGORY:
        return frozenset(c for c in SAMPLES if _in_class(c, [(C.CATEGORY, av)]))
    out: frozenset[str] = frozenset()
    for sub in _children(item):
        for it in sub:
            out |= _chars(it)
    return out


def _children(item: Item) -> list[list[Item]]:
    """The sequences inside a compound item (a group, a repeat, the alternatives)."""
    op, av = item
    if op is C.SUBPATTERN:
        return [list(av[-1])]
    if op in REPEATS or op is C.POSSESSIVE_REPEAT:
        return [list(av[2])]
    if op is C.BRANCH:
        return [list(b) for b in av[1]]
    if op is C.ATOMIC_GROUP or op in (C.ASSERT, C.ASSERT_NOT):
        return [list(av if op is C.ATOMIC_GROUP else av[1])]
    return []


def _min_width(seq: list[Item]) -> int:
    return P.SubPattern(P.State(), seq).getwidth()[0] if seq else 0


def _first(seq: list[Item]) -> frozenset[str]:
    """The characters a match of the sequence can begin with."""
    out: frozenset[str] = frozenset()
    for item in seq:
        op, av = item
        if op is C.AT:
            continue
        if op is C.BRANCH:
            for b in av[1]:
                out |= _first(list(b))
        elif op is C.SUBPATTERN or op in REPEATS or op is C.POSSESSIVE_REPEAT:
            out |= _first(_children(item)[0])
        else:
            out |= _chars(item)
        if _min_width([item]) > 0:
            return out
    return out


def _unbounded(item: Item) -> bool:
    op, av = item
    return op in REPEATS and av[1] > UNBOUNDED


def _tail(seq: list[Item]) -> frozenset[str]:
    """The characters a match of the sequence may or may not end with: those of its trailing
    unbounded repeats and optional parts. When one of them can also start the sequence, a
    repeat of it can split the same input in many ways."""
    out: frozenset[str] = frozenset()
    for item in reversed(seq):
        op, av = item
        if _unbounded(item) or _min_width([item]) == 0:
            out |= _chars(item)
        elif op is C.SUBPATTERN:
            out |= _tail(_children(item)[0])
        elif op is C.BRANCH:
            widths = {P.SubPattern(P.State(), list(b)).getwidth() for b in av[1]}
            for b in _children(item):
                out |= _chars((C.SUBPATTERN, (None, 0, 0, b))) if len(widths) > 1 else _tail(b)
        if _min_width([item]) > 0:
            break
    return out


def _problems(seq: list[Item]) -> list[str]:
    out: list[str] = []
    for i, item in enumerate(seq):
        op, av = item
        for sub in _children(item):
            out += _problems(sub)
        if not _unbounded(item):
            continue
        body = _children(item)[0]
        if _min_width(body) == 0:
            out.append("a repeat of something that can match nothing")
        elif _tail(body) & _first(body):
            out.append("a repeat whose body may or may not end with what it can start with "
                       "(nested quantifiers such as (a+)+, or (a|aa)*)")
        for alt in [it for it in body if it[0] is C.BRANCH]:
            starts = [_first(list(b)) for b in alt[1][1]]
            if any(a & b for k, a in enumerate(starts) for b in starts[k + 1:]):
                out.append("a repeat of alternatives that can start with the same character")
        mine = _chars(item)
        for nxt in seq[i + 1:]:
            if _unbounded(nxt) and _first(_children(nxt)[0]) & mine:
                out.append("two unbounded repeats that can match the same characters, with "
                           "nothing between them that only the second could match "
                           "(such as [^@]+\\.[^@]+)")
                break
            if _min_width([nxt]) == 0 or (_chars(nxt) and _chars(nxt) <= mine):
                continue
            break
    return out


def backtracking_risk(pattern: str) -> str | None:
    """Why `pattern` can backtrack for long on a crafted value, or None."""
    try:
        seq = list(P.parse(pattern))
    except re.error as e:
        return f"not a regular expression: {e}"
    found = _problems(seq)
    anchored = bool(seq) and seq[0] == (C.AT, C.AT_BEGINNING)
    if not anchored and any(_unbounded(it) for it in _walk(seq)):
        found.append("an unbounded repeat in a pattern that does not start with ^")
    return "; ".join(dict.fromkeys(found)) or None


def _walk(seq: list[Item]):
    for item in seq:
        yield item
        for sub in _children(item):
            yield from _walk(sub)


#: The longest string a pattern is run on. Java's engine (the jobs) recurses once per
#: repetition of a group, so `(\.[a-z]+)+` on a 256 KiB value overflows the task's stack and
#: fails its batch on every retry; a value past this length is refused as too long, by the
#: client and the jobs alike, before any pattern sees it.
PATTERN_INPUT_MAX = 1024


def guard_patterns(schema: Any) -> Any:
    """A copy of the schema in which every string with a `pattern` also has a `maxLength` of
    at most PATTERN_INPUT_MAX, placed just before the pattern, so both sides report it first
    (the client's validator and the jobs' compiled contract both check this copy)."""
    if isinstance(schema, list):
        return [guard_patterns(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    guarded = isinstance(schema.get("pattern"), str) and not (
        isinstance(schema.get("maxLength"), int) and schema["maxLength"] <= PATTERN_INPUT_MAX)
    for k, v in schema.items():
        if guarded and k == "maxLength":
            continue
        if guarded and k == "pattern":
            out["maxLength"] = PATTERN_INPUT_MAX
        out[k] = guard_patterns(v)
    return out
