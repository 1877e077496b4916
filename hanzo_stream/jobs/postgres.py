"""A `postgres` sink: the settlement jobs' records also land in PostgreSQL, exactly once.

The standard's phase 1 keeps billing events in PostgreSQL too. The engine (totals.py) sends a
batch's records to Kafka, flushes, then upserts the same records here in one transaction,
keyed by the record's deterministic id (`aggregate.id_field`). A crash anywhere between the
two makes Spark replay the batch, which re-sends identical Kafka records (absorbed by id
downstream) and rewrites identical rows: `ON CONFLICT ... DO UPDATE ... WHERE IS DISTINCT
FROM` turns a replayed row into a no-op, and a row that would *change* is logged as an error,
since a settled window must never move.

The DSN comes from the environment only (`dsn_env`, default HANZO_STREAM_POSTGRES_DSN): a
Kubernetes Secret or `local up`'s own server. Unset, the sink is off and the job says so at
start. The tables are the SQL files under postgres_migrations/, applied in order at start
under an advisory lock and recorded in hanzo_stream_migrations.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

log = logging.getLogger("hanzo_stream.jobs")

DSN_ENV = "HANZO_STREAM_POSTGRES_DSN"
MIGRATIONS = Path(__file__).parent / "postgres_migrations"
MIGRATIONS_TABLE = "hanzo_stream_migrations"
EVENT_ID = "event_id"  # the Kafka record's envelope id, beside the data fields
STATEMENT_TIMEOUT_MS = 120_000  # a lock held elsewhere fails the batch (and it is retried)
RETRY_S = 120.0  # how long a batch retries a server that is down before the job fails


class PostgresSinkError(RuntimeError):
    pass


def connect(dsn: str):
    """A connection with a statement timeout, keeping any `options` the DSN carries."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    options = " ".join(filter(None, [str(conninfo_to_dict(dsn).get("options") or ""),
                                     f"-c statement_timeout={STATEMENT_TIMEOUT_MS}"]))
    return psycopg.connect(dsn, connect_timeout=10, options=options)


def migrations() -> list[tuple[str, str]]:
    """(version, sql) of every migration, in order: the file names sort."""
    return [(p.stem, p.read_text()) for p in sorted(MIGRATIONS.glob("*.sql"))]


def migrate(conn) -> list[str]:
    """Apply the migrations this database lacks, in one transaction; returns their versions."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (MIGRATIONS_TABLE,))
        cur.execute(f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} (version text PRIMARY KEY, "
                    "applied_at timestamptz NOT NULL DEFAULT now())")
        cur.execute(f"SELECT version FROM {MIGRATIONS_TABLE}")
        done = {r[0] for r in cur.fetchall()}
        applied = []
        for version, sql in migrations():
            if version not in done:
                cur.execute(sql)
                cur.execute(f"INSERT INTO {MIGRATIONS_TABLE} (version) VALUES (%s)", (version,))
                applied.append(version)
    return applied


def check_table(conn, table: str, columns: Sequence[str], where: str) -> None:
    """The table must have every column the job writes, the first one its primary key."""
    with conn.cursor() as cur:
        cur.execute("SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = current_schema() AND table_name = %s", (table,))
        have = {r[0] for r in cur.fetchall()}
        cur.execute("SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                    "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(%s) AND i.indisprimary",
                    (table,))
        key = [r[0] for r in cur.fetchall()]
    fix = f"add a migration under {MIGRATIONS.relative_to(MIGRATIONS.parents[2])}/"
    if not have:
        raise PostgresSinkError(f"{where}: table {table!r} does not exist in this database; {fix}")
    missing = [c for c in columns if c not in have]
    if missing:
        raise PostgresSinkError(f"{where}: table {table!r} lacks column(s) {', '.join(missing)} "
                                f"that the job writes; {fix}")
    if key != [columns[0]]:
        raise PostgresSinkError(f"{where}: table {table!r} must have the primary key "
                                f"({columns[0]}), the record's id (it has {key or 'none'}); {fix}")


def row_of(value: bytes, fields: Sequence[str]) -> tuple[Any, ...]:
    """A record's envelope -> (data fields..., envelope id). Decimals stay exact."""
    env = json.loads(value, parse_float=Decimal)
    data = env["data"]
    return (*(data[f] for f in fields), env["id"])


def upsert_sql(table: str, columns: Sequence[str]) -> str:
    cols = ", ".join(columns)
    rest = columns[1:]
    return (f"INSERT INTO {table} ({cols}) VALUES ({', '.join(['%s'] * len(columns))}) "
            f"ON CONFLICT ({columns[0]}) DO UPDATE SET "
            + ", ".join(f"{c} = EXCLUDED.{c}" for c in rest)
            + f", written_at = now() WHERE ({', '.join(f'{table}.{c}' for c in rest)}) "
            f"IS DISTINCT FROM ({', '.join(f'EXCLUDED.{c}' for c in rest)}) "
            "RETURNING (xmax = 0)")


def upsert(conn, table: str, columns: Sequence[str], rows: Iterable[tuple]) -> tuple[int, int]:
    """Write rows in one transaction; returns (inserted, changed). Identical rows are no-ops."""
    rows = list(rows)
    flags: list[bool] = []
    with conn.transaction(), conn.cursor() as cur:
        cur.executemany(upsert_sql(table, columns), rows, returning=True)
        while True:
            flags += [r[0] for r in cur.fetchall()]
            if not cur.nextset():
                break
    inserted = sum(flags)
    return inserted, len(flags) - inserted


class PostgresSink:
    """One table the engine writes each batch's records to, after Kafka has them."""

    def __init__(self, name: str, dsn: str, table: str, fields: Sequence[str], where: str):
        self.name, self.dsn, self.table, self.where = name, dsn, table, where
        self.fields = tuple(fields)
        self.columns = (*self.fields, EVENT_ID)

    def prepare(self) -> list[str]:
        """Migrate and check the table at job start, so a wrong schema fails before any batch."""
        with connect(self.dsn) as conn:
            applied = migrate(conn)
            check_table(conn, self.table, self.columns, self.where)
        return applied

    def write(self, values: Sequence[bytes]) -> tuple[int, int]:
        """Upsert the records' rows, retrying a server that is down for up to RETRY_S."""
        import psycopg

        rows = [row_of(v, self.fields) for v in values]
        deadline = time.monotonic() + RETRY_S
        delay = 1.0
        while True:
            try:
                with connect(self.dsn) as conn:
                    inserted, changed = upsert(conn, self.table, self.columns, rows)
                break
            except psycopg.OperationalError as e:
                if time.monotonic() + delay > deadline:
                    raise PostgresSinkError(f"sink {self.name}: PostgreSQL unreachable for "
                                            f"{RETRY_S:.0f}s: {e}") from e
                log.warning("sink %s: PostgreSQL: %s; retrying in %.0fs", self.name, e, delay)
                time.sleep(delay)
                delay = min(delay * 2, 15.0)
        if changed:
            log.error("sink %s: %d row(s) of %s changed on rewrite: a settled window moved",
                      self.name, changed, self.table)
        return inserted, changed
