"""What the local platform keeps in its state directory (HANZO_STREAM_HOME), named once.

local/ writes these files: the 0600 credentials file (local/credentials.py) and each
background process' record (local/daemon.py). The jobs and the CLI read them through this
module, so nothing outside local/ imports the local platform (docs/architecture.md).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

CREDENTIALS = "credentials.json"
# The services' secrets in the credentials file's `services` section.
S3_ACCESS_KEY = "s3-access-key"
S3_SECRET_KEY = "s3-secret-key"
PAGERDUTY_ROUTING_KEY = "pagerduty-routing-key"
POSTGRES_ADMIN_PASSWORD = "postgres-admin-password"  # the local PostgreSQL's superuser
POSTGRES_ROLE_PASSWORD = "postgres-billing-password"  # its role the settlement jobs log in as
OBJECT_STORE = "object-store"  # the local S3-compatible store's daemon (local/object_store.py)


def credentials_file(home: Path) -> Path:
    return Path(home) / CREDENTIALS


def read_credentials(home: Path) -> dict[str, Any]:
    """The credentials file's content ({} before the platform first ran)."""
    f = credentials_file(home)
    return json.loads(f.read_text()) if f.exists() else {}


def record_file(home: Path, name: str) -> Path:
    """Where a background process' pid, port and URL are remembered across invocations."""
    return Path(home) / f"{name}.json"


def pid_alive(pid: int | None, marker: str) -> bool:
    """The process runs and is ours: its command line still names `marker` (a path under the
    home), so a reused pid never counts."""
    if not pid:
        return False
    try:
        return marker in cmdline(pid)
    except OSError:
        return False


def cmdline(pid: int | str) -> str:
    """A process' command line, its arguments joined by spaces (OSError once it is gone)."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")


def session_cpu(sid: int) -> float:
    """CPU seconds of every process in session `sid`: a daemon is its session's leader
    (spawn), so this is its own, what it started and still runs (a Spark driver's JVM), and
    what those reaped. What `local status` shows per part: which one keeps a machine busy."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            after = stat.read_text().rsplit(")", 1)[1].split()  # the name may hold spaces
        except (OSError, IndexError):
            continue  # gone while we read
        # state ppid pgrp session ... utime(11) stime cutime cstime; not the dead (Z, X)
        if int(after[3]) == sid and after[0] not in ("Z", "X"):
            ticks += sum(int(x) for x in after[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def read_record(home: Path, name: str) -> dict[str, Any]:
    """{pid, port, url, extra} of a background process ({} if it never started)."""
    f = record_file(home, name)
    return json.loads(f.read_text()) if f.exists() else {}


def running_url(home: Path, name: str) -> str | None:
    """The URL of the named background process while it runs, else None."""
    rec = read_record(home, name)
    marker = (rec.get("extra") or {}).get("cmdline") or str(home)
    return rec.get("url") if pid_alive(rec.get("pid"), marker) else None


def write_record(home: Path, name: str, pid: int | None, port: int | None, url: str | None,
                 extra: dict[str, Any]) -> Path:
    """Write a background process' record (read_record's), whole or not at all."""
    f = record_file(home, name)
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": pid, "port": port, "url": url, "extra": extra}, indent=2))
    tmp.replace(f)
    return f


def publish_url(home: Path, name: str, url: str, port: int) -> Path:
    """Record an endpoint this process serves, as a daemon's record ({pid, port, url, extra}).

    A job's command line names its spec, not its state directory, so the record is trusted
    while this pid still runs this same command line (extra.cmdline), not `home`."""
    return write_record(home, name, os.getpid(), port, url,
                        {"cmdline": cmdline("self").strip()})
