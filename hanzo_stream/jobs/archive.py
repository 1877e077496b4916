"""Read the audit archive the way Spark does: only files its file-sink log committed.

Spark's file sink writes a batch's Parquet files first and records them in
<path>/_spark_metadata/<batch> after; a batch that fails half-way leaves files that no log
entry names, and its replay writes new files under new names. Spark readers consult the log;
anything that lists the directory (pyarrow, DuckDB, Athena, ClickHouse's s3()) must read it
too, or deduplicate by event `id`. This module is that reader for Python.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

if TYPE_CHECKING:
    from .spec import JobSpec

LOG_DIR = "_spark_metadata"
PATH_ENV = "HANZO_STREAM_ARCHIVE_PATH"


def archive_path(spec: JobSpec, env: Mapping[str, str] | None = None) -> str:
    """Where audit-archive writes: HANZO_STREAM_ARCHIVE_PATH, else the spec's `archive` sink."""
    env = os.environ if env is None else env
    return env.get(PATH_ENV) or spec.resolve(spec.sink("archive").get("path"))


@dataclass(frozen=True)
class LogEntry:
    path: str
    action: str  # add | delete


def _fs(path: str) -> tuple[pafs.FileSystem, str]:
    if path.startswith("s3a://"):
        path = "s3://" + path[len("s3a://"):]
    return pafs.FileSystem.from_uri(path) if "://" in path else (pafs.LocalFileSystem(), path)


def parse_log_file(text: str) -> list[LogEntry]:
    lines = text.strip().splitlines()
    if not lines or not lines[0].startswith("v"):
        raise ValueError("not a Spark file-sink log file")
    return [LogEntry(d["path"], d.get("action", "add")) for d in map(json.loads, lines[1:]) if d]


def _to_fs_path(uri: str) -> str:
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return unquote(parsed.path)
    return f"{parsed.netloc}{unquote(parsed.path)}"  # s3a://bucket/key -> bucket/key


def committed_files(path: str) -> list[str]:
    """Files of every committed batch: the newest compaction plus the batches after it."""
    fs, base = _fs(path)
    log_dir = f"{base.rstrip('/')}/{LOG_DIR}"
    infos = fs.get_file_info(pafs.FileSelector(log_dir, allow_not_found=True))
    batches: dict[int, str] = {}
    for info in infos:
        name = info.base_name
        stem = name[:-len(".compact")] if name.endswith(".compact") else name
        if info.is_file and stem.isdigit():
            batches[int(stem)] = info.path
    compacted = [b for b, p in batches.items() if p.endswith(".compact")]
    start = max(compacted, default=-1)
    live: dict[str, None] = {}
    for b in sorted(batches):
        if b < start:
            continue
        with fs.open_input_stream(batches[b]) as f:
            for e in parse_log_file(f.read().decode()):
                p = _to_fs_path(e.path)
                if e.action == "delete":
                    live.pop(p, None)
                else:
                    live[p] = None
    return list(live)


def read_committed(path: str) -> pa.Table:
    """The archive as a table (partition columns org_id and date included), committed files only."""
    files = committed_files(path)
    fs, base = _fs(path)
    if not files:
        return pa.table({})
    dataset = ds.dataset(files, filesystem=fs, format="parquet",
                         partitioning=ds.partitioning(
                             pa.schema([("org_id", pa.string()), ("date", pa.string())]),
                             flavor="hive"),
                         partition_base_dir=base)
    return dataset.to_table()
