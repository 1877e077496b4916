"""Make Spark's progress visible to Kafka: commit processed offsets to the registry group.

Spark's Kafka source keeps offsets in its checkpoint and commits nothing, so lag tools see
no group. After each micro-batch a StreamingQueryListener hands the batch's end offsets
(exclusive: the next offset to read, which is what Kafka expects) to an OffsetCommitter,
which commits them under the registry group with confluent-kafka. The group is never used
to read (no kafka.group.id): it only carries the commits. A job made of several queries
over the same topic commits, per partition, the smallest offset all of them have passed.

The checkpoint stays the truth for restarts; the committed offsets may trail it by one
batch after a crash, which only overstates lag until the next batch.

Commits are serialized: the listener thread and the run's final commit never send at the
same time, so a late listener commit can neither move the group backwards nor be cut off
when shutdown closes the consumer (`finish()` waits for it, commits the final offsets, then
closes, and says in the log whether the final offsets were committed).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.connection import Connection

log = logging.getLogger("hanzo_stream.jobs")

TP = tuple[str, int]


def parse_offsets(value: str | Mapping | None) -> dict[TP, int]:
    """Spark's Kafka offset JSON ({"topic": {"0": 42}}) -> {(topic, 0): 42}."""
    if value is None:
        return {}
    doc = json.loads(value) if isinstance(value, str) else value
    return {(t, int(p)): int(o) for t, parts in doc.items() for p, o in parts.items()}


def end_offsets(progress: Any) -> dict[TP, int]:
    """End offsets of a query progress (listener event object or lastProgress dict).

    A query that reads one topic through two branches reports it twice; take the minimum.
    """
    if progress is None:
        return {}
    sources = progress["sources"] if isinstance(progress, Mapping) else progress.sources
    out: dict[TP, int] = {}
    for s in sources:
        end = s["endOffset"] if isinstance(s, Mapping) else s.endOffset
        for tp, o in parse_offsets(end).items():
            out[tp] = min(o, out.get(tp, o))
    return out


@dataclass
class OffsetCommitter:
    """Commits, per partition, the offset every query of the job has processed."""

    group: str
    conn: Connection | None
    queries: set[str] = field(default_factory=set)
    consumer: Any = None  # a confluent_kafka.Consumer; built lazily
    _seen: dict[str, dict[TP, int]] = field(default_factory=dict)
    _committed: dict[TP, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)  # the offsets seen
    _commit_lock: threading.Lock = field(default_factory=threading.Lock)  # one commit at a time
    _closed: bool = False

    def record(self, query: str, offsets: Mapping[TP, int]) -> None:
        with self._lock:
            if not offsets:
                return
            seen = self._seen.setdefault(query, {})
            for tp, o in offsets.items():
                seen[tp] = max(o, seen.get(tp, o))

    def pending(self) -> dict[TP, int]:
        """Offsets ready to commit: all queries have reported, minimum across them."""
        with self._lock:
            if not self.queries or any(q not in self._seen for q in self.queries):
                return {}
            views = [self._seen[q] for q in self.queries]
            tps = set.intersection(*(set(v) for v in views))
            agreed = {tp: min(v[tp] for v in views) for tp in tps}
            return {tp: o for tp, o in agreed.items() if self._committed.get(tp) != o}

    def commit(self) -> dict[TP, int]:
        """Commit what is pending, synchronously; one commit at a time (see the module doc)."""
        with self._commit_lock:
            todo = self.pending()
            if not todo:
                return {}
            if self._closed:
                raise RuntimeError(f"the committer is closed; not committed: {_describe(todo)}")
            from confluent_kafka import TopicPartition

            if self.consumer is None:
                from confluent_kafka import Consumer

                assert self.conn is not None
                self.consumer = Consumer(self.conn.confluent() | {
                    "group.id": self.group, "enable.auto.commit": False, "log_level": 3})
            commit_retrying(self.consumer,
                             [TopicPartition(t, p, o) for (t, p), o in sorted(todo.items())])
            with self._lock:
                self._committed.update(todo)
            return todo

    def record_and_commit(self, query: str, progress: Any) -> None:
        """Listener entry point: never raises (a failed commit only delays lag visibility)."""
        try:
            self.record(query, end_offsets(progress))
            done = self.commit()
            if done:
                log.debug("committed %d partition offsets for group %s", len(done), self.group)
        except Exception as e:  # the next batch commits again
            log.warning("could not commit offsets for group %s: %s", self.group, e)

    def finish(self, timeout: float = 90.0) -> bool:
        """The run's last commit, then close: True if the group holds every offset reported.

        Waits (bounded: a broker that is gone must not keep the job from exiting) for a
        listener commit still in flight, commits what is pending after it, and logs an error
        naming the offsets if they could not be committed.
        """
        outcome: dict[str, Any] = {}

        def final() -> None:
            try:
                outcome["done"] = self.commit()
            except Exception as e:
                outcome["error"] = e

        worker = threading.Thread(target=final, name=f"final-commit-{self.group}", daemon=True)
        worker.start()
        worker.join(timeout)
        if "done" in outcome:
            if outcome["done"]:
                log.info("committed the final offsets of group %s: %s", self.group,
                         _describe(outcome["done"]))
            return self.close(timeout=5.0)
        why = outcome.get("error") or f"no answer within {timeout:g}s"
        log.error("final offsets of group %s were NOT committed (%s): %s; its lag shows them "
                  "unread until the next run commits", self.group, why, _describe(self.pending()))
        self._shut(timeout=0)
        return False

    def close(self, timeout: float = 30.0) -> bool:
        """Close the consumer once no commit is in flight; True if nothing was left uncommitted."""
        if self._closed:
            return not self.pending()  # closed before, and said so then
        left = self._shut(timeout)
        if left:
            log.error("group %s: closing with offsets NOT committed: %s", self.group, _describe(left))
        return not left

    def _shut(self, timeout: float) -> dict[TP, int]:
        """Mark closed, close the consumer after any commit in flight; returns what is left."""
        if not self._commit_lock.acquire(timeout=timeout):
            self._closed = True  # a commit is stuck: its consumer is left to the process exit
            log.error("group %s: a commit was still in flight after %gs at shutdown; it may not "
                      "complete", self.group, timeout)
            return self.pending()
        try:
            self._closed = True
            if self.consumer is not None:
                self.consumer.close()
                self.consumer = None
            return self.pending()
        finally:
            self._commit_lock.release()


def _describe(offsets: Mapping[TP, int]) -> str:
    return ", ".join(f"{t}[{p}]={o}" for (t, p), o in sorted(offsets.items())) or "nothing"


RETRY_CODES = {"_WAIT_COORD", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE",
               "NOT_COORDINATOR", "_TIMED_OUT", "_TRANSPORT", "REQUEST_TIMED_OUT"}


def commit_retrying(consumer, partitions: list, timeout: float = 60.0) -> None:
    """A synchronous commit that waits out a coordinator still loading (a fresh cluster)."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout
    while True:
        try:
            consumer.commit(offsets=partitions, asynchronous=False)
            return
        except KafkaException as e:
            err = e.args[0] if e.args else None
            retriable = err is not None and (err.retriable() or err.name() in RETRY_CODES)
            if not retriable or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def commit_listener(committer: OffsetCommitter, on_progress: Iterable = ()):
    """A StreamingQueryListener (PySpark >= 3.4) feeding the committer.

    on_progress: extra callables (progress dict) -> None, e.g. metrics writers; iterated at
    every event, so hooks added after registration run too.
    """
    from pyspark.sql.streaming import StreamingQueryListener

    hooks = on_progress

    class CommitListener(StreamingQueryListener):
        def onQueryStarted(self, event) -> None:
            pass

        def onQueryProgress(self, event) -> None:
            p = event.progress
            committer.record_and_commit(p.name, p)
            for hook in hooks:
                try:
                    hook(json.loads(p.json))
                except Exception as e:
                    log.warning("progress hook failed: %s", e)

        def onQueryIdle(self, event) -> None:
            pass

        def onQueryTerminated(self, event) -> None:
            pass

    return CommitListener()


@dataclass(frozen=True)
class OffsetLogEntry:
    """One file of a checkpoint's offsets/ log: what Spark decided before running a batch."""

    watermark_ms: int
    timestamp_ms: int
    sources: tuple[dict[TP, int], ...]


def parse_offset_log(text: str) -> OffsetLogEntry:
    """Spark's offset log format: 'v1', a metadata JSON line, then one line per source."""
    lines = text.strip().splitlines()
    if not lines or not lines[0].startswith("v"):
        raise ValueError("not a Spark offset log entry")
    meta = json.loads(lines[1])
    return OffsetLogEntry(
        watermark_ms=int(meta.get("batchWatermarkMs", 0)),
        timestamp_ms=int(meta.get("batchTimestampMs", 0)),
        sources=tuple(parse_offsets(line) if line != "-" else {} for line in lines[2:]),
    )


def read_offset_log(spark, checkpoint: str, batch_id: int) -> OffsetLogEntry | None:
    """The offset log entry of `batch_id`, through Hadoop's FileSystem (local, s3a, hdfs)."""
    if batch_id < 0:
        return None
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(f"{checkpoint.rstrip('/')}/offsets/{batch_id}")
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(path):
        return None
    stream = fs.open(path)
    try:
        text = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()
    return parse_offset_log(text)
