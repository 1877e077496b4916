"""Read the audit archive the way Spark does: only files its file-sink log committed.

Spark's file sink writes a batch's Parquet files first and records them in
<path>/_spark_metadata/<batch> after; a batch that fails half-way leaves files that no log
entry names, and its replay writes new files under new names. Spark readers consult the log;
anything that lists the prefix (pyarrow, DuckDB, Athena, ClickHouse's s3()) must read it
too, or deduplicate by event `id`. This module is that reader for Python, for a local
directory or an s3a:// prefix (through boto3, with `hanzo_stream.jobs.s3` settings).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from . import s3

if TYPE_CHECKING:
    from .spec import JobSpec

LOG_DIR = "_spark_metadata"
PATH_ENV = "HANZO_STREAM_ARCHIVE_PATH"
PARTITIONS = ("org_id", "date")  # the archive's partition columns, in directory order


def archive_path(spec: JobSpec, env: Mapping[str, str] | None = None) -> str:
    """Where audit-archive writes: HANZO_STREAM_ARCHIVE_PATH, else the spec's `archive` sink."""
    env = os.environ if env is None else env
    return env.get(PATH_ENV) or spec.resolve(spec.sink("archive").get("path"))


@dataclass(frozen=True)
class LogEntry:
    path: str
    action: str  # add | delete


class _Local:
    def __init__(self, base: str):
        self.base = base

    def list(self, under: str) -> list[str]:
        root = Path(under)
        return sorted(str(p) for p in root.rglob("*") if p.is_file()) if root.is_dir() else []

    def read(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def locate(self, uri: str) -> str:
        parsed = urlparse(uri)
        return unquote(parsed.path) if parsed.scheme in ("", "file") else uri


class _S3:
    def __init__(self, base: str, store: s3.S3Access):
        self.bucket, _ = s3.split(base)
        self.client = store.client()

    def list(self, under: str) -> list[str]:
        _, prefix = s3.split(under)
        return [f"s3a://{self.bucket}/{k}" for k in s3.list_keys(self.client, self.bucket,
                                                                 prefix.rstrip("/") + "/")]

    def read(self, path: str) -> bytes:
        bucket, key = s3.split(path)
        return self.client.get_object(Bucket=bucket, Key=key)["Body"].read()

    def locate(self, uri: str) -> str:
        parsed = urlparse(uri)
        return f"s3a://{parsed.netloc}{unquote(parsed.path)}"


def _store(path: str, store: s3.S3Access | None) -> _Local | _S3:
    if s3.is_s3(path):
        return _S3(path, store or s3.resolve())
    return _Local(path)


def parse_log_file(text: str) -> list[LogEntry]:
    lines = text.strip().splitlines()
    if not lines or not lines[0].startswith("v"):
        raise ValueError("not a Spark file-sink log file")
    return [LogEntry(d["path"], d.get("action", "add")) for d in map(json.loads, lines[1:]) if d]


def committed_files(path: str, store: s3.S3Access | None = None) -> list[str]:
    """Files of every committed batch: the newest compaction plus the batches after it.

    Local paths for a directory, s3a:// URLs for an s3a:// archive.
    """
    fs = _store(path, store)
    batches: dict[int, str] = {}
    for f in fs.list(f"{path.rstrip('/')}/{LOG_DIR}"):
        name = f.rsplit("/", 1)[-1]
        stem = name[:-len(".compact")] if name.endswith(".compact") else name
        if stem.isdigit():
            batches[int(stem)] = f
    compacted = [b for b, p in batches.items() if p.endswith(".compact")]
    start = max(compacted, default=-1)
    live: dict[str, None] = {}
    for b in sorted(batches):
        if b < start:
            continue
        for e in parse_log_file(fs.read(batches[b]).decode()):
            p = fs.locate(e.path)
            if e.action == "delete":
                live.pop(p, None)
            else:
                live[p] = None
    return list(live)


def listed_files(path: str, store: s3.S3Access | None = None) -> list[str]:
    """Every Parquet file under the archive, committed or not: what a listing reader sees."""
    return [f for f in _store(path, store).list(path) if f.endswith(".parquet")
            and f"/{LOG_DIR}/" not in f]


def read_committed(path: str, store: s3.S3Access | None = None) -> pa.Table:
    """The archive as a table (partition columns org_id and date included), committed files only."""
    fs = _store(path, store)
    base = fs.locate(path).rstrip("/") + "/"
    tables = []
    for f in committed_files(path, store):
        t = pq.read_table(io.BytesIO(fs.read(f)))
        parts = dict(seg.split("=", 1) for seg in f[len(base):].split("/")[:-1] if "=" in seg)
        for col in PARTITIONS:
            t = t.append_column(col, pa.array([unquote(parts.get(col, ""))] * t.num_rows, pa.string()))
        tables.append(t)
    return pa.concat_tables(tables, promote_options="default") if tables else pa.table({})
