"""The read-only ClickHouse HTTP endpoint of the embedded chDB (hanzo_stream/jobs/chdb_http.py):
the request parsing and the refusals alone, then one real endpoint on a chDB in tmp_path, asked
over HTTP, by clickhouse-connect and by `hanzo-stream local sql`."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from hanzo_stream.core import state
from hanzo_stream.jobs import chdb_http, clickhouse
from hanzo_stream.jobs.chdb_http import QueryError, check_read_only, parse_request
from hanzo_stream.local import platform

from .test_jobs import _events

# ---------------------------------------------------------------- the pure parts


def test_the_query_comes_from_the_url_the_body_or_both():
    assert parse_request("/?query=SELECT%201") == chdb_http.Request("SELECT 1", "TabSeparated")
    assert parse_request("/", b"SELECT 2").query == "SELECT 2"
    # as ClickHouse does for INSERT data: the URL's part, then the body
    assert parse_request("/?query=SELECT", b" 3").query == "SELECT\n 3"
    assert parse_request("/?default_format=JSONEachRow&query_id=x&session_id=y", b"SELECT 1"
                         ).format == "JSONEachRow"


@pytest.mark.parametrize("target, body, code", [
    ("/", b"", 62), ("/?query=%20%0A", b"  ", 62),  # empty: a syntax error, as ClickHouse says
    ("/?default_format=JSON%20x", b"SELECT 1", 73),  # a format is one name
    ("/?default_format=DataFrame", b"SELECT 1", 73),  # chDB's Python objects are no HTTP answer
])
def test_a_request_without_a_query_or_with_a_bad_format_is_refused(target, body, code):
    with pytest.raises(QueryError) as e:
        parse_request(target, body)
    assert e.value.code == code and str(e.value).startswith(f"Code: {code}. DB::Exception: ")


@pytest.mark.parametrize("canonical", [
    "SELECT 1", "WITH 1 AS x SELECT x", "SHOW TABLES", "DESCRIBE TABLE events", "EXISTS TABLE events",
    "EXPLAIN SELECT 1", "SELECT 'INTO OUTFILE' FORMAT JSON",
])
def test_reads_pass(canonical):
    check_read_only(canonical)


@pytest.mark.parametrize("canonical", [
    "INSERT INTO events FORMAT Values", "CREATE TABLE x (a UInt8) ENGINE = Memory", "DROP TABLE events",
    "ALTER TABLE events DELETE WHERE 1", "SYSTEM STOP MERGES", "KILL QUERY WHERE 1 ASYNC",
    "USE system", "SET max_threads = 1", "OPTIMIZE TABLE events FINAL",
    "SELECT 1 INTO OUTFILE 'x.csv'",
])
def test_anything_but_a_read_is_refused_as_clickhouse_refuses_a_readonly_user(canonical):
    with pytest.raises(QueryError) as e:
        check_read_only(canonical)
    assert e.value.code == 164 and str(e.value).endswith("(READONLY)")


def test_errors_keep_clickhouse_code_and_a_literal_round_trips():
    assert QueryError("Code: 60. DB::Exception: Unknown table. (UNKNOWN_TABLE)").code == 60
    assert QueryError("something else").code == 1000
    assert chdb_http.string_literal("a'b\\c") == "'a\\'b\\\\c'"
    assert chdb_http.content_type("JSONEachRow").startswith("application/json")
    assert chdb_http.content_type("Native") == "application/octet-stream"


# ---------------------------------------------------------------- a real endpoint


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A ChdbSink as the job holds it, served as the job serves it, recorded where the job does."""
    home = tmp_path_factory.mktemp("home")
    job_dir = home / "jobs" / platform.SQL_JOB
    sink = clickhouse.ChdbSink(job_dir / "chdb")
    mp = pytest.MonkeyPatch()
    mp.setattr(chdb_http, "QUERY_TIMEOUT_S", 1)  # so the timeout test takes a second
    try:
        endpoint = chdb_http.serve(sink.path, sink.lock, 0, job_dir)
    finally:
        mp.undo()
    try:
        yield home, sink, endpoint
    finally:
        endpoint.close()
        sink.close()


def http(url: str, query: str | None = None, body: bytes | None = None, **params: str):
    """(status, body, headers) of one request; GET without a body."""
    if query is not None:
        params["query"] = query
    target = f"{url}/?{urllib.parse.urlencode(params)}" if params else url
    try:
        with urllib.request.urlopen(urllib.request.Request(target, data=body), timeout=30) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.read(), e.headers


def count(url: str) -> int:
    return int(chdb_http.ask(url, "SELECT count() FROM events"))


def test_it_answers_as_clickhouse_does_over_http(served):
    _, sink, ep = served
    assert http(f"{ep.url}/ping")[:2] == (200, b"Ok.\n")
    assert http(ep.url + "/")[:2] == (200, b"Ok.\n")
    before = count(ep.url)
    sink.write(_events(["h1", "h2"], offset0=1000), "http-test")
    assert count(ep.url) == before + 2  # the writer's insert, seen by the reader at once
    status, body, headers = http(ep.url, "SELECT id FROM events WHERE id LIKE 'h%' ORDER BY id",
                                 default_format="JSONEachRow")
    assert (status, body) == (200, b'{"id":"h1"}\n{"id":"h2"}\n')
    assert headers["X-ClickHouse-Format"] == "JSONEachRow"
    assert headers["Content-Type"].startswith("application/json")
    status, body, headers = http(ep.url, body=b"SELECT count() AS n FROM events_unique WHERE id "
                                              b"LIKE 'h%' FORMAT JSON")  # in the body, with FORMAT
    assert status == 200 and json.loads(body)["data"] == [{"n": 2}]
    assert headers["X-ClickHouse-Format"] == "JSON"
    status, body, _ = http(ep.url, "SELECT 1 -- and a comment;\n;")
    assert (status, body) == (200, b"1\n")


@pytest.mark.parametrize("sql", [
    "INSERT INTO events (id, team_id) VALUES ('intruder', 't')",
    "INSERT INTO events (id) SELECT 'intruder'",
    "CREATE TABLE intruder (a UInt8) ENGINE = MergeTree ORDER BY a",
    "DROP TABLE events", "ALTER TABLE events DELETE WHERE 1", "TRUNCATE TABLE events",
])
def test_writes_are_refused_by_clickhouse_itself_and_change_nothing(served, sql):
    _, _, ep = served
    before = count(ep.url)
    status, body, headers = http(ep.url, body=sql.encode())
    assert status == 500 and headers["X-ClickHouse-Exception-Code"] == "164", body
    assert body.startswith(b"Code: 164. DB::Exception: ") and body.endswith(b"(READONLY)\n")
    # past the statement check, straight to the session: the engine's readonly=1 refuses it
    with pytest.raises(QueryError) as e:
        ep.db.execute_unchecked(sql)
    assert e.value.code == 164 and "Cannot execute query in readonly mode" in str(e.value)
    assert "not served here" not in str(e.value)  # ClickHouse's words, not ours
    assert count(ep.url) == before
    assert chdb_http.ask(ep.url, "EXISTS TABLE intruder") == b"0\n"
    assert chdb_http.ask(ep.url, "SELECT count() FROM events WHERE id = 'intruder'") == b"0\n"


def test_what_readonly_leaves_open_is_refused_too(served, tmp_path):
    _, _, ep = served
    out = tmp_path / "out.csv"
    for sql, code in (("SYSTEM STOP MERGES", 164), ("KILL QUERY WHERE 1", 164), ("USE system", 164),
                      (f"SELECT 1 INTO OUTFILE '{out}'", 164), ("SELECT 1; SYSTEM STOP MERGES", 62),
                      ("SELECT $$'$$; SYSTEM STOP MERGES; '", 62), ("SET max_threads = 1", 164),
                      ("SELECT 1 SETTINGS readonly = 0", 164), ("SELECT * FROM file('/etc/hostname')", 164)):
        with pytest.raises(QueryError) as e:
            chdb_http.ask(ep.url, sql)
        assert e.value.code == code, (sql, str(e.value))
    assert not out.exists()
    assert chdb_http.ask(ep.url, "SELECT currentDatabase()") == b"default\n"  # USE did not stick


def test_errors_are_clickhouse_text_with_http_500(served):
    _, _, ep = served
    status, body, headers = http(ep.url, "SELEC 1")
    assert status == 500 and body.startswith(b"Code: 62. DB::Exception: Syntax error")
    assert b"formatQuerySingleLine" not in body  # the check's own wrapping is not the user's query
    status, body, _ = http(ep.url, "SELECT * FROM nowhere")
    assert status == 500 and b"Code: 60. DB::Exception:" in body and b"(UNKNOWN_TABLE)" in body
    status, body, _ = http(ep.url, "SELECT 1", default_format="NoSuchFormat")
    assert status == 500 and b"(UNKNOWN_FORMAT)" in body
    assert http(f"{ep.url}/play")[0] == 404
    t0 = time.monotonic()  # no query holds the writer back longer than max_execution_time
    status, body, _ = http(ep.url, "SELECT sum(cityHash64(number)) FROM numbers(100000000000)")
    assert status == 500 and b"(TIMEOUT_EXCEEDED)" in body and time.monotonic() - t0 < 10


def test_queries_wait_for_the_writer(served):
    """One lock around every chDB call of the process: a query waits while an insert runs."""
    _, sink, ep = served
    done = threading.Event()
    with sink.lock:
        t = threading.Thread(target=lambda: (chdb_http.ask(ep.url, "SELECT 1"), done.set()))
        t.start()
        assert not done.wait(0.5)
    assert done.wait(10)
    t.join(10)


def test_clickhouse_connect_can_query_it(served):
    import clickhouse_connect
    from clickhouse_connect.driver.exceptions import DatabaseError

    _, _, ep = served
    client = clickhouse_connect.get_client(host="127.0.0.1", port=ep.server.server_address[1])
    try:
        assert client.query("SELECT count() FROM events").result_rows == [(count(ep.url),)]
        assert client.query_arrow("SELECT 'x' AS s").to_pylist() == [{"s": "x"}]
        with pytest.raises(DatabaseError, match="164"):
            client.command("INSERT INTO events (id) VALUES ('intruder')")
    finally:
        client.close()


def test_local_sql_finds_the_endpoint_and_says_when_the_job_is_not_running(served, tmp_path,
                                                                          monkeypatch):
    from typer.testing import CliRunner

    from hanzo_stream.cli import app

    home, _, ep = served
    assert platform.sql_url(home) == ep.url  # what `local status` shows as sql_url
    monkeypatch.setenv("HANZO_STREAM_HOME", str(home))
    n = count(ep.url)
    res = CliRunner().invoke(app, ["local", "sql", "SELECT count() AS n FROM events", "--format", "CSV"])
    assert (res.exit_code, res.stdout) == (0, f"{n}\n")
    res = CliRunner().invoke(app, ["local", "sql", "SELECT count() AS n FROM events", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["data"] == [{"n": n}]
    res = CliRunner().invoke(app, ["local", "sql", "DROP TABLE events"])
    assert res.exit_code == 1 and "Code: 164" in res.output

    monkeypatch.setenv("HANZO_STREAM_HOME", str(tmp_path))  # no job has run here
    res = CliRunner().invoke(app, ["local", "sql", "SELECT 1"])
    assert res.exit_code == 1
    assert "analytics-ingest is not running" in res.output and "local start analytics-ingest" in res.output
    stale = state.record_file(tmp_path / "jobs" / platform.SQL_JOB, chdb_http.RECORD)
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"pid": 2**22 + 1, "port": 1, "url": ep.url,  # a dead pid
                                 "extra": {"cmdline": "python -m hanzo_stream.jobs.cli"}}))
    assert platform.sql_url(tmp_path) is None


def test_the_docs_blocks_run_as_written(served, registry, monkeypatch):
    """docs/local-platform.md's `local sql`, curl and clickhouse-connect blocks, against the
    endpoint as `local env` exports it."""
    from rich.console import Console

    from tests import docs_blocks

    home, _, ep = served
    exported = platform.service_exports(platform.Context(home, registry, Console()))
    assert f"export HANZO_STREAM_SQL_URL={ep.url}\n" in exported
    env = {**os.environ, "HANZO_STREAM_HOME": str(home), "HANZO_STREAM_SQL_URL": ep.url}
    out = docs_blocks.run("docs/local-platform.md", ["local-sql"], env).stdout
    assert '{"event":"signup","n":' in out and '"data":' in out, out
    out = docs_blocks.run("docs/local-platform.md", ["sql-curl"], env).stdout
    assert out.startswith("Ok.\n") and '{"team_id":"t1","events":' in out, out
    monkeypatch.setenv("HANZO_STREAM_SQL_URL", ep.url)
    scope: dict = {}
    exec(docs_blocks.block("docs/local-platform.md", "sql-clickhouse-connect"), scope)
    assert list(scope["by_event"]["event"]) == ["signup"]


def test_closing_removes_the_record_and_leaves_the_writer_as_it_was(served, tmp_path):
    _, sink, _ = served  # (one chDB directory per process at a time: a second endpoint of it)
    ep = chdb_http.serve(sink.path, sink.lock, 0, tmp_path)
    assert state.running_url(tmp_path, chdb_http.RECORD) == ep.url
    ep.close()
    assert state.running_url(tmp_path, chdb_http.RECORD) is None
    assert not state.record_file(tmp_path, chdb_http.RECORD).exists()
    before = sink.count()
    sink.write(_events(["after-close"], offset0=2000), "after-close")
    assert sink.count() == before + 1
