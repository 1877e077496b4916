"""The ClickHouse `events` table and the two ways the analytics job writes it.

Idempotence is layered, because a micro-batch can be replayed after a crash and producers
can retry an event under the same id:

1. Every insert carries `insert_deduplication_token` derived from the Kafka offsets it holds
   (not from Spark's batch id, which restarts at 0 with a new checkpoint). A replayed batch
   sends the same rows with the same token and ClickHouse drops the block, so even plain
   `SELECT count()` sees no replay duplicates. Non-replicated MergeTree only honours tokens
   with `non_replicated_deduplication_window` > 0, which the DDL sets.
2. The engine is ReplacingMergeTree ordered by (team_id, day, event, id): copies of one event
   produced twice (same envelope, different offsets) collapse on merge, keeping the latest
   offset. Until the merge has happened a plain read sees both copies: exact reads use the
   view `<table>_unique` (`SELECT * FROM <table> FINAL`), created with the table, or FINAL,
   or argMax by `_offset` grouped by `id`.
"""

from __future__ import annotations

import hashlib
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

DEDUP_WINDOW = 10_000  # blocks remembered per table; > the batches a crash can replay

EVENTS_COLUMNS = (
    ("id", "String"),
    ("team_id", "String"),
    ("org_id", "Nullable(String)"),
    ("event", "String"),
    ("distinct_id", "String"),
    ("timestamp", "DateTime64(3, 'UTC')"),
    ("properties", "String"),  # the event's properties object as JSON text
    ("session_id", "Nullable(String)"),
    ("ip", "Nullable(String)"),
    ("sent_at", "Nullable(DateTime64(3, 'UTC'))"),
    ("source", "LowCardinality(String)"),
    ("_partition", "UInt16"),  # Kafka provenance: where the row came from
    ("_offset", "UInt64"),
    ("_kafka_timestamp", "DateTime64(3, 'UTC')"),
)


def events_ddl(table: str = "events") -> str:
    cols = ",\n  ".join(f"`{n}` {t}" for n, t in EVENTS_COLUMNS)
    return (f"CREATE TABLE IF NOT EXISTS {table} (\n  {cols},\n"
            "  `_inserted_at` DateTime64(3, 'UTC') DEFAULT now64(3)\n)\n"
            "ENGINE = ReplacingMergeTree(_offset)\n"
            "PARTITION BY toYYYYMM(timestamp)\n"
            "ORDER BY (team_id, toDate(timestamp), event, id)\n"
            f"SETTINGS non_replicated_deduplication_window = {DEDUP_WINDOW}")


def unique_view(table: str = "events") -> str:
    """The table as readers must count it: each event id once, merged or not."""
    return f"{table}_unique"


def unique_view_ddl(table: str = "events") -> str:
    return f"CREATE VIEW IF NOT EXISTS {unique_view(table)} AS SELECT * FROM {table} FINAL"


def insert_token(group: str, offset_ranges: Mapping[int, tuple[int, int]]) -> str:
    """A token naming exactly the Kafka records in a block: same records, same token."""
    ranges = ",".join(f"{p}:{lo}-{hi}" for p, (lo, hi) in sorted(offset_ranges.items()))
    return f"{group}:" + hashlib.sha256(ranges.encode()).hexdigest()


class EventsSink(Protocol):
    def write(self, rows: pa.Table, token: str) -> None: ...
    def query(self, sql: str) -> pa.Table: ...
    def count(self) -> int: ...
    def close(self) -> None: ...


class ChdbSink:
    """Embedded ClickHouse in a persistent directory, owned by this one process (the driver).

    `lock` serializes every chDB call of the process: the writer's here and the read-only
    queries chdb_http serves from the same directory while the job runs."""

    def __init__(self, path: str | Path, table: str = "events"):
        from chdb import session

        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.table = table
        self.lock = threading.Lock()
        self._session = session.Session(str(self.path))
        self._session.query(events_ddl(table))
        self._session.query(unique_view_ddl(table))
        self._spool = Path(tempfile.mkdtemp(prefix="hs-chdb-spool-"))

    def write(self, rows: pa.Table, token: str) -> None:
        import pyarrow.ipc as ipc

        # file(..., Arrow) is ~3x faster than the Python() table function for 2 KB rows.
        spool = self._spool / "batch.arrow"
        with ipc.new_file(str(spool), rows.schema) as w:
            w.write_table(rows)
        cols = ", ".join(f"`{c}`" for c in rows.column_names)
        try:
            with self.lock:
                self._session.query(
                    f"INSERT INTO {self.table} ({cols}) SELECT {cols} FROM file('{spool}', Arrow) "
                    f"SETTINGS insert_deduplication_token = '{token}'")
        finally:
            spool.unlink(missing_ok=True)

    def query(self, sql: str) -> pa.Table:
        with self.lock:
            return self._session.query(sql, "ArrowTable")

    def count(self) -> int:
        """Events, each id once (the view reads FINAL)."""
        with self.lock:
            return int(str(self._session.query(f"SELECT count() FROM {unique_view(self.table)}",
                                               "CSV")).strip())

    def close(self) -> None:
        with self.lock:
            self._session.close()
        self._spool.rmdir()


class HttpSink:
    """A ClickHouse server over HTTP(S) with clickhouse-connect; same DDL, same tokens."""

    def __init__(self, url: str, table: str = "events", client=None):
        self.table = table
        if client is None:
            import clickhouse_connect

            client = clickhouse_connect.get_client(dsn=url)
        self._client = client
        self._client.command(events_ddl(table))
        self._client.command(unique_view_ddl(table))

    def write(self, rows: pa.Table, token: str) -> None:
        self._client.insert_arrow(self.table, rows,
                                  settings={"insert_deduplication_token": token})

    def query(self, sql: str) -> pa.Table:
        return self._client.query_arrow(sql)

    def count(self) -> int:
        """Events, each id once (the view reads FINAL: a full read of the key columns)."""
        return int(self._client.command(f"SELECT count() FROM {unique_view(self.table)}"))

    def close(self) -> None:
        self._client.close()


def open_sink(url: str | None, chdb_path: str, table: str = "events") -> EventsSink:
    return HttpSink(url, table) if url else ChdbSink(chdb_path, table)
