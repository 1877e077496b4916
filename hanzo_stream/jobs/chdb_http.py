"""Read-only SQL over ClickHouse's HTTP interface, served by the driver that owns the chDB.

chDB's directory belongs to the one process that opened it (the analytics-ingest driver), so
without this a reader had to stop the job. The driver serves the part of ClickHouse's HTTP
interface that ClickHouse's clients use (curl, clickhouse-connect): `/ping`, `GET` or `POST /`
with the query in `?query=` and/or the body, `default_format` or a FORMAT clause, and errors as
HTTP 500 with ClickHouse's own "Code: N. DB::Exception: ..." text. Nothing else: no sessions,
no compression, URL settings other than `default_format` are ignored.

Read-only, twice over:

1. The queries run on a second chDB session of the same directory opened with `readonly=1`
   and `max_execution_time`: ClickHouse itself refuses INSERT, DDL, ALTER, table functions
   and changes of settings, and no query runs longer than QUERY_TIMEOUT_S.
2. readonly leaves open what the embedded engine does for its own client: SYSTEM, KILL, USE
   (which would stay for every later query), INTO OUTFILE (a file written here) and several
   statements in one. So ClickHouse's parser first turns the text into one canonical
   statement (formatQuerySingleLine: one statement or a syntax error, comments gone), which
   must be a SELECT, WITH, SHOW, DESCRIBE, EXISTS or EXPLAIN without INTO OUTFILE, and
   that canonical text is what runs.

Every chDB call takes the sink's lock (ChdbSink.lock): a query waits for an insert and holds
the next one back for at most QUERY_TIMEOUT_S.
"""

from __future__ import annotations

import contextlib
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ..core import state

PORT_ENV = "HANZO_STREAM_SQL_PORT"  # the endpoint's port on 127.0.0.1; 0 (default): a free one
RECORD = "sql"  # <job state dir>/sql.json: {pid, port, url}, as the local daemons' records
HOST = "127.0.0.1"
QUERY_TIMEOUT_S = 10  # max_execution_time: how long a query may hold the writer back
DEFAULT_FORMAT = "TabSeparated"  # ClickHouse's HTTP default
READ_STATEMENTS = ("SELECT", "WITH", "SHOW", "DESCRIBE", "EXISTS", "EXPLAIN")
_FORMAT = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_NOT_CLICKHOUSE = {"dataframe", "arrowtable"}  # chDB's Python-object results, no bytes
_FORMAT_CLAUSE = re.compile(r" FORMAT (\w+)$")
_WRAPPER = re.compile(r"\.? ?: In scope SELECT formatQuerySingleLine\(.*\)\. \(", re.S)


class QueryError(Exception):
    """A refused or failed query, as ClickHouse words it: "Code: N. DB::Exception: ... (NAME)"."""

    def __init__(self, text: str):
        super().__init__(text)
        m = re.match(r"Code: (\d+)\.", text)
        self.code = int(m.group(1)) if m else 1000  # 1000: POCO_EXCEPTION, ClickHouse's catch-all


def refused(why: str) -> QueryError:
    return QueryError(f"Code: 164. DB::Exception: {why}. (READONLY)")


@dataclass(frozen=True)
class Request:
    query: str
    format: str


def parse_request(target: str, body: bytes = b"") -> Request:
    """What ClickHouse's HTTP interface reads from a request: the query is `?query=` and the
    body, joined (either may be empty); the output format is `default_format`, unless a
    FORMAT clause in the query says otherwise."""
    params = urllib.parse.parse_qs(urllib.parse.urlsplit(target).query, keep_blank_values=True)
    parts = [params.get("query", [""])[-1], body.decode("utf-8", errors="replace")]
    query = "\n".join(p for p in parts if p.strip())
    fmt = params.get("default_format", [""])[-1] or DEFAULT_FORMAT
    if not _FORMAT.fullmatch(fmt) or fmt.lower() in _NOT_CLICKHOUSE:
        raise QueryError(f"Code: 73. DB::Exception: Unknown format {fmt}. (UNKNOWN_FORMAT)")
    if not query.strip():
        raise QueryError("Code: 62. DB::Exception: Empty query. (SYNTAX_ERROR)")
    return Request(query, fmt)


def check_read_only(canonical: str) -> None:
    """Refuse a canonical statement (formatQuerySingleLine's) that is not a plain read."""
    kind = canonical.split(" ", 1)[0].upper()
    if kind not in READ_STATEMENTS:
        raise refused(f"Cannot execute query in readonly mode: {kind or 'an empty query'} is "
                      f"not served here, only {', '.join(READ_STATEMENTS)}")
    if " INTO OUTFILE " in canonical:
        raise refused("Cannot execute query in readonly mode: INTO OUTFILE is not served here")


def string_literal(text: str) -> str:
    """`text` as a ClickHouse string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


class ReadOnlyChdb:
    """A read-only chDB session of `path`, every call under the writer's `lock`."""

    def __init__(self, path: str | Path, lock: threading.Lock):
        from chdb import session

        self.lock = lock
        with lock:
            self._session = session.Session(
                f"{path}?readonly=1&max_execution_time={QUERY_TIMEOUT_S}")

    def _query(self, sql: str, fmt: str) -> bytes:
        try:
            return bytes(self._session.query(sql, fmt).bytes())
        except Exception as e:  # chdb's ChdbError carries ClickHouse's own text
            raise QueryError(_WRAPPER.sub(". (", str(e).strip())) from None

    def canonical(self, query: str) -> str:
        """The query as ClickHouse's parser reads it: exactly one statement, comments gone."""
        text = query.strip().rstrip(";")
        out = self._query(f"SELECT formatQuerySingleLine({string_literal(text)})", "TabSeparatedRaw")
        return out.decode().strip()

    def run(self, query: str, fmt: str = DEFAULT_FORMAT) -> tuple[bytes, str]:
        """The answer and its format: `fmt`, or the query's FORMAT clause. Or QueryError."""
        with self.lock:
            canonical = self.canonical(query)
            check_read_only(canonical)
            clause = _FORMAT_CLAUSE.search(canonical)  # the formatter puts FORMAT last
            return self._query(canonical, fmt), clause.group(1) if clause else fmt

    def execute_unchecked(self, sql: str) -> bytes:
        """Straight to the read-only session, without the statement check: how the tests show
        that ClickHouse itself refuses writes."""
        with self.lock:
            return self._query(sql, "TabSeparated")

    def close(self) -> None:
        with self.lock:
            self._session.close()


def content_type(fmt: str) -> str:
    name = fmt.lower()
    if name.startswith("json"):
        return "application/json; charset=UTF-8"
    if name.startswith(("csv", "tsv", "tabseparated")):
        return f"text/{'csv' if name.startswith('csv') else 'tab-separated-values'}; charset=UTF-8"
    if name.startswith(("pretty", "vertical", "markdown", "values", "xml", "template")):
        return "text/plain; charset=UTF-8"
    return "application/octet-stream"  # Native, RowBinary, Arrow, Parquet, ...


def _handler(db: ReadOnlyChdb) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/ping" or (url.path == "/" and "query" not in urllib.parse.parse_qs(url.query)):
                return self._answer(200, b"Ok.\n", "text/plain; charset=UTF-8")  # a health check
            self._serve(b"")

        def do_POST(self) -> None:  # noqa: N802
            self._serve(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        def _serve(self, body: bytes) -> None:
            url = urllib.parse.urlsplit(self.path)
            if url.path != "/":
                return self._answer(404, b"Code: 404. DB::Exception: Not found: only /, /ping "
                                         b"are served here. (HTTP_NOT_FOUND)\n", "text/plain")
            try:
                req = parse_request(self.path, body)
                out, fmt = db.run(req.query, req.format)
            except QueryError as e:
                return self._answer(500, f"{e}\n".encode(), "text/plain; charset=UTF-8",
                                    {"X-ClickHouse-Exception-Code": str(e.code)})
            self._answer(200, out, content_type(fmt), {"X-ClickHouse-Format": fmt})

        def _answer(self, status: int, data: bytes, ctype: str,
                    headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the job's log is for the job

    return Handler


class Endpoint:
    """The HTTP server in a daemon thread, its session and its published record."""

    def __init__(self, db: ReadOnlyChdb, port: int = 0, record_dir: Path | None = None):
        self.db = db
        self.server = ThreadingHTTPServer((HOST, port), _handler(db))
        self.url = f"http://{HOST}:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="chdb-http",
                                        daemon=True)
        self._thread.start()
        self.record = (state.publish_url(record_dir, RECORD, self.url, self.server.server_address[1])
                       if record_dir is not None else None)

    def close(self) -> None:
        if self.record is not None:
            self.record.unlink(missing_ok=True)
        self.server.shutdown()
        self.server.server_close()
        self.db.close()


def serve(path: str | Path, lock: threading.Lock, port: int = 0,
          record_dir: Path | None = None) -> Endpoint:
    """Serve chDB at `path` read-only on 127.0.0.1:`port` (0: a free one), recorded in
    `record_dir` (the job's state directory) for `hanzo-stream local sql` and `local status`."""
    return Endpoint(ReadOnlyChdb(path, lock), port, record_dir)


def ask(url: str, query: str, fmt: str = DEFAULT_FORMAT, timeout: float = 60) -> bytes:
    """A query to a ClickHouse HTTP endpoint (this one or a server): its answer, or QueryError."""
    target = f"{url.rstrip('/')}/?{urllib.parse.urlencode({'default_format': fmt})}"
    req = urllib.request.Request(target, data=query.encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.read()
    except urllib.error.HTTPError as e:
        with contextlib.closing(e):
            raise QueryError(e.read().decode(errors="replace").strip()) from None
