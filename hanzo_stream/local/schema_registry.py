"""A real Confluent-compatible schema registry on this machine: Apicurio Registry.

Apicurio publishes its runnable Quarkus distribution to Maven Central
(io.apicurio:apicurio-registry-app:<v>:tar.gz:all), so Maven fetches it like the Kafka
jars. Its Confluent-compatible API (ccompat v7) is what confluent-kafka's
SchemaRegistryClient talks to: the URL returned by start() ends in /apis/ccompat/v7.

Version 3.0.9: the 3.1+ builds need Java 21 and this platform runs Java 17. Storage is H2 in
a file under <home> (Apicurio's `sql` storage), so schemas survive `local down`/`up`; the
production deployment uses PostgreSQL or kafkasql storage instead, same API.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from ..artifacts import versions
from ..artifacts.jvm import java, jit_flags
from ..core.connection import Connection
from ..core.paths import cache_dir
from .daemon import Daemon, StartFailed, managed
from .kafka import free_ports

APICURIO_VERSION = versions.APICURIO_VERSION
ARTIFACT = f"io.apicurio:apicurio-registry-app:{APICURIO_VERSION}:tar.gz:all"
NAME = "schema-registry"
API_PATH = "/apis/ccompat/v7"

__all__ = ["StartFailed", "install", "start", "status", "stop", "url"]


def _extract(tar: tarfile.TarFile, dest: Path) -> None:
    """tarfile's "data" filter where this Python has it (3.11.4 and later); on Debian 12's
    3.11.2 the same refusals by hand: nothing lands outside `dest` or links out of it, and
    no device files."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, filter="data")
        return
    root = dest.resolve()

    def inside(p: Path) -> bool:
        p = p.resolve()
        return p == root or root in p.parents

    for m in tar.getmembers():
        target = dest / m.name
        link = (target.parent / m.linkname) if m.issym() else (dest / m.linkname) if m.islnk() else target
        if m.isdev() or not inside(target) or not inside(link):
            raise StartFailed(f"{tar.name}: {m.name} would land outside {dest}; refusing the archive")
    tar.extractall(dest)


def install() -> Path:
    """The unpacked distribution in the download cache (fetched once with Maven)."""
    dest = cache_dir() / f"apicurio-registry-{APICURIO_VERSION}"
    if (dest / ".complete").exists():
        return dest
    if shutil.which("mvn") is None:
        raise StartFailed("Maven (mvn) is not installed: run .ci/install or `apt-get install maven`")
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    with tempfile.TemporaryDirectory() as work:
        proc = subprocess.run(["mvn", "-q", "-B", "dependency:copy", f"-Dartifact={ARTIFACT}",
                               f"-DoutputDirectory={work}"], cwd=work, capture_output=True, text=True)
        if proc.returncode != 0:
            raise StartFailed(f"mvn could not fetch {ARTIFACT}:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
        (archive,) = Path(work).glob("*.tar.gz")
        partial.mkdir(parents=True)
        with tarfile.open(archive) as tar:
            _extract(tar, partial)
    runner = _runner(partial)
    (partial / ".complete").write_text(f"{ARTIFACT}\n{runner.name}\n")
    shutil.rmtree(dest, ignore_errors=True)
    partial.rename(dest)
    return dest


def _runner(root: Path) -> Path:
    jars = sorted(root.rglob("apicurio-registry-app-*-runner.jar"))
    if not jars:
        raise StartFailed(f"no apicurio-registry-app-*-runner.jar under {root}")
    return jars[0]


def start(home: Path, cluster_conn: Connection | None = None, port: int | None = None,
          heap_mb: int = 384, timeout: float = 180.0) -> str:
    """Start the registry (or find it running); returns its Confluent-API base URL.

    cluster_conn is accepted for the platform's uniform start signature and reserved for
    kafkasql storage; the local registry keeps its data in H2 under `home`, so it needs no
    topic, SCRAM user or ACL on the broker.
    """
    del cluster_conn
    d = Daemon.load(home, NAME)
    if d.alive() and d.url:
        return d.url
    runner = _runner(install())
    port = port or d.port or free_ports(1)[0]
    db = home / "db" / "registry"
    db.parent.mkdir(parents=True, exist_ok=True)
    argv = [
        java(), *jit_flags(), f"-Xmx{heap_mb}m", "-XX:+UseSerialGC",
        "-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={port}",
        "-Dquarkus.http.access-log.enabled=false",
        "-Dapicurio.storage.kind=sql", "-Dapicurio.storage.sql.kind=h2",
        f"-Dapicurio.datasource.url=jdbc:h2:file:{db}",
        "-Dapicurio.datasource.jdbc.initial-size=2", "-Dapicurio.datasource.jdbc.min-size=2",
        "-Dapicurio.datasource.jdbc.max-size=10",
        "-jar", str(runner),
    ]
    d.port, d.url = port, f"http://127.0.0.1:{port}{API_PATH}"
    d.spawn(argv)
    try:
        d.wait_http(f"{d.url}/subjects", timeout)
    except StartFailed:
        d.stop()
        raise
    return d.url


stop, status, url = managed(NAME)
