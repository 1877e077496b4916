"""A real PostgreSQL server for the settlement jobs' copy of billing (Debian's postgresql).

The standard's phase 1 persists billing events in PostgreSQL too. Locally this is Debian's
server binaries run as the platform's own process on 127.0.0.1 (no Unix socket, password
authentication with SCRAM), with one database (`hanzo`) owned by one login role
(`hanzo_billing`) that the jobs use; the jobs create their tables themselves
(hanzo_stream/jobs/postgres.py). Both passwords are generated into credentials.json; the
jobs get the DSN in their environment only.

PostgreSQL refuses to run as root. Run as root (CI), the server runs as Debian's `postgres`
user (setpriv, no fork) with its data in a 0700 directory of its own under the system temp
directory, since the state directory's parents are usually closed to other users.
"""

from __future__ import annotations

import glob
import hashlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from ..core.state import POSTGRES_ADMIN_PASSWORD as ADMIN_PASSWORD
from ..core.state import POSTGRES_ROLE_PASSWORD as ROLE_PASSWORD
from .credentials import Credentials
from .daemon import Daemon, StartFailed, managed
from .kafka import free_ports

NAME = "postgres"
DATABASE = "hanzo"
ROLE = "hanzo_billing"  # owns DATABASE; the settlement jobs log in as it
SUPERUSER = "hanzo_admin"
SERVER_USER = "postgres"  # Debian's, when we run as root


def _bin(tool: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{tool}"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    exe = found[-1] if found else shutil.which(tool)
    if exe is None:
        raise StartFailed("PostgreSQL is not installed: run .ci/install-postgres.sh "
                          "(apt-get install postgresql)")
    return exe


def _as_server_user() -> tuple[list[str], int | None, int | None]:
    """argv prefix, uid and gid that run the server: ourselves, or `postgres` under root."""
    if os.geteuid() != 0:
        return [], None, None
    try:
        pw = pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise StartFailed(f"running as root, PostgreSQL needs the {SERVER_USER!r} user that "
                          "Debian's postgresql package creates: run .ci/install-postgres.sh") from None
    return ([shutil.which("setpriv") or "setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}",
             "--clear-groups", "--"], pw.pw_uid, pw.pw_gid)


def base_dir(home: Path) -> Path:
    """Where the server's files live: under the state directory, or (as root) a directory of
    its own that the server user can reach."""
    if os.geteuid() != 0:
        return home / NAME
    digest = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"hanzo-stream-postgres-{digest}"


def _own(path: Path, uid: int | None, gid: int | None) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)
    if uid is not None:
        os.chown(path, uid, gid or 0)


def _initdb(base: Path, creds: Credentials) -> None:
    prefix, uid, gid = _as_server_user()
    _own(base, uid, gid)
    pwfile = base / "initdb-password"
    fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, creds.service(ADMIN_PASSWORD).encode())
        os.close(fd)
        if uid is not None:
            os.chown(pwfile, uid, gid or 0)
        proc = subprocess.run([*prefix, _bin("initdb"), "-D", str(base / "data"), "-U", SUPERUSER,
                               "--auth=scram-sha-256", f"--pwfile={pwfile}", "--encoding=UTF8",
                               "--locale=C"], capture_output=True, text=True, timeout=120)
    finally:
        pwfile.unlink(missing_ok=True)
    if proc.returncode != 0:
        raise StartFailed(f"initdb failed in {base / 'data'}:\n{proc.stdout[-1500:]}{proc.stderr[-1500:]}")


def _dsn(port: int, user: str, password: str, database: str) -> str:
    return f"postgresql://{quote(user, safe='')}:{quote(password, safe='')}@127.0.0.1:{port}/{database}"


def dsn(home: Path, creds: Credentials) -> str | None:
    """The jobs' DSN (password included: for an environment variable only), None if not running."""
    d = Daemon.load(home, NAME)
    if not (d.alive() and d.port):
        return None
    return _dsn(d.port, ROLE, creds.service(ROLE_PASSWORD), DATABASE)


def _wait_ready(d: Daemon, admin_dsn: str, timeout: float) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if not d.alive():
            raise StartFailed(f"PostgreSQL exited during start-up; log {d.log_file}:\n{d.log_tail()}")
        try:
            with psycopg.connect(admin_dsn, connect_timeout=2):
                return
        except psycopg.OperationalError as e:
            last = str(e).strip()
        time.sleep(0.2)
    raise StartFailed(f"PostgreSQL not ready after {timeout:.0f}s ({last}); log {d.log_file}")


def _ensure_role_and_database(admin_dsn: str, creds: Credentials) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (ROLE,)).fetchone()
        verb = "ALTER" if exists else "CREATE"
        # The verifier is computed here (libpq), so the password never reaches the server's
        # statement text, where an error would log it.
        verifier = conn.pgconn.encrypt_password(creds.service(ROLE_PASSWORD).encode(), ROLE.encode(),
                                                b"scram-sha-256").decode()
        conn.execute(sql.SQL(verb + " ROLE {} LOGIN PASSWORD {}").format(
            sql.Identifier(ROLE), sql.Literal(verifier)))
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(DATABASE), sql.Identifier(ROLE)))


def start(home: Path, creds: Credentials, timeout: float = 60.0) -> str:
    """Start the server (initialising it the first time); returns where it listens."""
    d = Daemon.load(home, NAME)
    base = base_dir(home)
    if not (base / "data" / "PG_VERSION").exists():
        _initdb(base, creds)
    if not d.alive():
        prefix, _, _ = _as_server_user()
        d.port = d.port or free_ports(1)[0]  # a restart keeps the DSN the jobs were given
        d.url = f"postgresql://127.0.0.1:{d.port}/{DATABASE}"
        d.extra = {"base": str(base)}
        # hanzo_stream.home: a custom setting that only marks the process as ours (daemon.py)
        d.spawn([*prefix, _bin("postgres"), "-D", str(base / "data"),
                 "-c", "listen_addresses=127.0.0.1", "-c", f"port={d.port}",
                 "-c", "unix_socket_directories=", "-c", "max_connections=40",
                 "-c", f"hanzo_stream.home={home}"])
    assert d.port is not None
    admin = _dsn(d.port, SUPERUSER, creds.service(ADMIN_PASSWORD), "postgres")
    _wait_ready(d, admin, timeout)
    _ensure_role_and_database(admin, creds)
    return str(d.url)


# stop: a fast shutdown (SIGINT: sessions are cut, the data is consistent); True if it ran.
stop, status, url = managed(NAME, sig=signal.SIGINT)


def purge(home: Path) -> None:
    """Remove the server's files (they may live outside the state directory, as root)."""
    stop(home)
    shutil.rmtree(base_dir(home), ignore_errors=True)


def rows(home: Path, creds: Credentials, table: str) -> int | None:
    """Rows in one of the jobs' tables; None when the server or the table is not there yet."""
    import psycopg
    from psycopg import sql

    url = dsn(home, creds)
    if url is None:
        return None
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()
    except psycopg.Error:
        return None
    return int(row[0]) if row else None

