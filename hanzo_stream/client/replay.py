"""Replaying dead letters without letting anyone forge a record (`hanzo-stream dead-letters
replay`).

Every principal may write dead_letter (the standard wants any producer able to park what it
cannot send), so a dead letter's headers are claims, not facts. Replaying one as the admin,
to whatever topic `hs.source.topic` names, would let any service plant records in
billing_events or audit_log. So each letter is judged before anything is written:

- its source is a registry topic (never dead_letter itself), and its bytes are whole;
- its stage is plausible: `producer:<p>` only if p produces that topic; `job:<g>` only if g
  is a registry group reading it and the record at hs.source.partition/offset is still there
  with exactly these bytes. A `producer:` stage is a claim anyone could write, so on a
  protected topic (billing_events, audit_log) such a letter needs `--include-protected`, given
  once its producer's team has recognised it;
- its bytes now pass the source topic's contract (the client's router), so what is replayed is
  what a producer could send today;
- it is written as a producer of that topic (the one its stage names when its password is
  at hand, else another of the topic's producers), never as the admin: the brokers' ACLs then
  hold the replay to what that producer may do.

What is refused is reported with the reason; nothing is written unless asked (`--execute`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import orjson

from ..core import dead_letter as dl
from ..registry import Registry
from ..registry.policy import PROTECTED_TOPICS
from .router import Accepted, Router

DEAD_LETTER_PARTITION = 0  # dead_letter has one partition (arrival order is replay order)
REPLAYED_FROM = "hs.replayed.from"


@dataclass(frozen=True)
class Letter:
    """One dead_letter record as read: its offset, value and headers."""

    offset: int
    value: bytes | None
    headers: Mapping[str, bytes]

    def text(self, name: str) -> str:
        return (self.headers.get(name) or b"").decode("utf-8", "replace")

    @property
    def source(self) -> str:
        return self.text(dl.H_SOURCE_TOPIC)

    @property
    def error_class(self) -> str:
        return self.text(dl.H_ERROR_CLASS)


@dataclass(frozen=True)
class Verdict:
    letter: Letter
    accepted: Accepted | None = None  # what would be written, when it passes
    writer: str | None = None  # the producer principal it is written as
    refused: str | None = None  # why not
    copy_of: int | None = None  # the dead_letter offset of the letter this one repeats


# What the source topic holds at (topic, partition, offset): its value, or MISSING.
MISSING = object()
SourceReader = Callable[[str, int, int], object]


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def judge(letter: Letter, registry: Registry, router: Router, read_source: SourceReader,
          writers: Mapping[str, str], include_protected: bool = False) -> Verdict:
    """The verdict on one letter; `writers`: producer principals whose passwords are at hand."""
    names = {t.name: t for t in registry.topics}
    source = letter.source
    if source not in names or source == dl.TOPIC:
        return Verdict(letter, refused=f"hs.source.topic {source!r} is not a topic of the registry")
    if dl.H_TRUNCATED in letter.headers or dl.H_KEY_TRUNCATED in letter.headers:
        return Verdict(letter, refused="its bytes were cut to fit dead_letter (hs.truncated): the "
                                       "original is gone; recover it from its producer")
    topic = names[source]
    stage = letter.text(dl.H_STAGE)
    kind, _, who = stage.partition(":")
    if kind == "producer":
        if who not in topic.producers:
            return Verdict(letter, refused=f"stage {stage!r}, but {who} does not produce {source}: "
                                           "only a producer of a topic can have had a record refused "
                                           "on its way there")
        if source in PROTECTED_TOPICS and not include_protected:
            return Verdict(letter, refused=f"{source} is protected and any principal can write a "
                                           f"letter that claims {stage!r}: have {who}'s team "
                                           "recognise it, then pass --include-protected")
    elif kind == "job":
        groups = [g for g in registry.groups if g.name == who and source in g.topics]
        if not groups:
            return Verdict(letter, refused=f"stage {stage!r}, but no group {who} reads {source}")
        partition, offset = _int(letter.text(dl.H_SOURCE_PARTITION)), _int(letter.text(dl.H_SOURCE_OFFSET))
        if partition is None or offset is None or partition < 0 or offset < 0:
            return Verdict(letter, refused=f"stage {stage!r} without the source record's "
                                           "partition and offset")
        original = read_source(source, partition, offset)
        if original is MISSING:
            return Verdict(letter, refused=f"{source}-{partition}@{offset} does not exist (never "
                                           "written, or past its retention)")
        if original != letter.value:
            return Verdict(letter, refused=f"the record at {source}-{partition}@{offset} is not "
                                           "this one (different bytes)")
    else:
        return Verdict(letter, refused=f"stage {stage!r} is neither producer:<principal> nor job:<group>")
    out = router.route_bytes(letter.value, topic=source, key=letter.headers.get(dl.H_ORIGINAL_KEY))
    if not isinstance(out, Accepted):
        return Verdict(letter, refused=f"still refused: {out.error.error_class}: {out.error.message}; "
                                       "fix the cause (or the event) first")
    preferred = [who] if kind == "producer" else []
    writer = next((p for p in [*preferred, *sorted(topic.producers)] if p in writers), None)
    if writer is None:
        wanted = ", ".join(sorted(p for p in topic.producers if p != "*"))
        return Verdict(letter, refused=f"no password for a producer of {source} ({wanted}): set "
                                       "HANZO_STREAM_PASSWORD_<NAME> or --secrets-file; a replay "
                                       "never writes as the admin")
    return Verdict(letter, accepted=out, writer=writer)


def judge_all(letters: list[Letter], registry: Registry, router: Router, read_source: SourceReader,
              writers: Mapping[str, str], include_protected: bool = False) -> list[Verdict]:
    """The verdicts in offset order, each failure replayed once: a letter written twice (a
    replayed batch, a resend: dead_letter.identity) or a second letter for an event id this
    run already replays is a copy, skipped, neither replayed nor refused."""
    first_of: dict[str, int] = {}
    out: list[Verdict] = []
    for letter in sorted(letters, key=lambda x: x.offset):
        same = dl.identity(letter.headers, letter.value)
        if same in first_of:
            out.append(Verdict(letter, copy_of=first_of[same]))
            continue
        v = judge(letter, registry, router, read_source, writers, include_protected)
        event_id = _event_id(v.accepted.value) if v.accepted else None
        if event_id is not None and f"id:{event_id}" in first_of:
            v = Verdict(letter, copy_of=first_of[f"id:{event_id}"])
        else:
            first_of[same] = letter.offset
            if event_id is not None:
                first_of[f"id:{event_id}"] = letter.offset
        out.append(v)
    return out


def _event_id(value: bytes) -> str | None:
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    return doc.get("id") if isinstance(doc, dict) and isinstance(doc.get("id"), str) else None


# -- reading and writing (confluent-kafka) ---------------------------------------------------

def _reader(conn):
    """A consumer that only reads what it is assigned and never commits."""
    from confluent_kafka import Consumer

    return Consumer(conn.confluent() | {"group.id": "hanzo-stream-replay", "enable.auto.commit": False})


def read_letters(conn, first: int, end: int | None, timeout: float = 10.0) -> list[Letter]:
    """dead_letter's records in [first, end) (end None: up to the current end)."""
    from confluent_kafka import TopicPartition

    c = _reader(conn)
    try:
        tp = TopicPartition(dl.TOPIC, DEAD_LETTER_PARTITION)
        low, high = c.get_watermark_offsets(tp, timeout=timeout)
        end = high if end is None else min(end, high)
        first = max(first, low)
        out: list[Letter] = []
        if first >= end:
            return out
        c.assign([TopicPartition(dl.TOPIC, DEAD_LETTER_PARTITION, first)])
        while not out or out[-1].offset < end - 1:
            m = c.poll(timeout)
            if m is None:
                raise TimeoutError(f"dead_letter@{out[-1].offset + 1 if out else first} did not arrive "
                                   f"within {timeout:.0f}s")
            if m.error():
                raise RuntimeError(str(m.error()))
            if m.offset() >= end:
                break
            out.append(Letter(m.offset(), m.value(), dict(m.headers() or [])))
        return out
    finally:
        c.close()


def source_reader(conn, timeout: float = 10.0) -> tuple[SourceReader, Callable[[], None]]:
    """Reads one record of a source topic by its partition and offset (MISSING if it is not
    there), and a function that closes the reader."""
    from confluent_kafka import TopicPartition

    c = _reader(conn)

    def read(topic: str, partition: int, offset: int) -> object:
        tp = TopicPartition(topic, partition)
        try:
            low, high = c.get_watermark_offsets(tp, timeout=timeout)
        except Exception:
            return MISSING
        if not low <= offset < high:
            return MISSING
        c.assign([TopicPartition(topic, partition, offset)])
        m = c.poll(timeout)
        return MISSING if m is None or m.error() or m.offset() != offset else m.value()

    return read, c.close


def write(verdicts: list[Verdict], connections: Mapping[str, object]) -> list[str]:
    """Write every accepted verdict as its writer (acks=all, idempotent); the errors."""
    from confluent_kafka import Producer

    from .producer import producer_config

    errors: list[str] = []
    for writer in sorted({v.writer for v in verdicts if v.accepted and v.writer}):
        p = Producer(producer_config(connections[writer], "hanzo-stream-replay"))
        for v in verdicts:
            if v.writer != writer or v.accepted is None:
                continue

            def done(err, _m, at=v.letter.offset):
                if err is not None:
                    errors.append(f"dead_letter@{at}: {err}")
            p.produce(v.accepted.topic, value=v.accepted.value, key=v.accepted.key,
                      headers=[(REPLAYED_FROM, f"{dl.TOPIC}@{v.letter.offset}".encode())],
                      on_delivery=done)
            p.poll(0)
        left = p.flush(60)
        if left:
            errors.append(f"{left} records written as {writer} were not acknowledged; run again")
    return errors
