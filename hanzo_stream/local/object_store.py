"""A real S3-compatible object store on this machine: s3proxy with its filesystem backend.

Production keeps the audit archive and the jobs' checkpoints in Hanzo Storage (MinIO) through
Spark's s3a connector; locally s3proxy (Maven Central, org.gaul:s3proxy, its self-contained
jar) serves the same S3 API from a directory under <home>, so `hanzo-stream local up` and the
tests run the s3a path for real: AWS signature v4, multipart uploads, S3A's directory markers.
Why s3proxy: the one S3 server that installs here (MinIO builds from the Go proxy only as an
untagged pseudo-version; moto is a mock). Why 4.x: 3.0.0 did not list an empty directory's
marker object, so Spark's checkpoint and file-sink logs failed on their empty directories.

The access key pair comes from credentials.json (0600) and reaches s3proxy on its standard
input (`--properties /dev/stdin`): no properties file holds it and `ps` does not show it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from ..artifacts import jars
from ..artifacts.jvm import java, jit_flags
from ..core import state
from ..jobs.s3 import S3Access
from .credentials import S3_ACCESS_KEY, S3_SECRET_KEY, Credentials
from .daemon import Daemon, StartFailed, managed
from .kafka import free_ports

NAME = state.OBJECT_STORE


def access(home: Path, creds: Credentials) -> S3Access:
    """How clients reach the running store (None endpoint when it does not run)."""
    return S3Access(url(home), creds.service(S3_ACCESS_KEY), creds.service(S3_SECRET_KEY))


def properties(endpoint: str, data: Path, creds: Credentials) -> bytes:
    """s3proxy's configuration, secrets included: only ever written to its stdin."""
    props = {
        "s3proxy.endpoint": endpoint,
        "s3proxy.authorization": "aws-v2-or-v4",
        "s3proxy.identity": creds.service(S3_ACCESS_KEY),
        "s3proxy.credential": creds.service(S3_SECRET_KEY),
        "jclouds.provider": "filesystem-nio2",
        "jclouds.filesystem.basedir": str(data),
    }
    return "".join(f"{k}={v}\n" for k, v in props.items()).encode()


def start(home: Path, creds: Credentials, buckets: Iterable[str] = (), port: int | None = None,
          timeout: float = 120.0, host: str = "127.0.0.1") -> str:
    """Start the store (or find it running), create `buckets` if missing; returns its URL.

    host: the address it listens on (the local Kubernetes node serves its pods on the node
    address, started from a thread inside the node's network namespace: hanzo_stream/kube/node.py).
    """
    d = Daemon.load(home, NAME)
    if not (d.alive() and d.url):
        jar = jars.s3proxy_jar()
        port = port or d.port or free_ports(1)[0]
        d.port, d.url = port, f"http://{host}:{port}"
        data = home / "data"
        data.mkdir(parents=True, exist_ok=True)
        d.spawn([java(), *jit_flags(), "-Xmx256m", "-XX:+UseSerialGC",
                 "-DLOG_LEVEL=warn",
                 "-Dlogback.statusListenerClass=ch.qos.logback.core.status.NopStatusListener",
                 f"-Djclouds.filesystem.basedir={data}",  # names <home>: the Daemon's marker
                 "-cp", str(jar), "org.gaul.s3proxy.Main", "--properties", "/dev/stdin"],
                stdin=properties(d.url, data, creds))
    store = S3Access(d.url, creds.service(S3_ACCESS_KEY), creds.service(S3_SECRET_KEY))
    client = _wait_ready(d, store, timeout)
    existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
    for b in sorted(set(buckets) - existing):
        client.create_bucket(Bucket=b)
    return d.url


def _wait_ready(d: Daemon, store: S3Access, timeout: float):
    """Until an authenticated request succeeds; fails fast (with the log's tail) if it died."""
    client = store.client()
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if not d.alive():
            raise StartFailed(f"{NAME} exited during start-up; log {d.log_file}:\n{d.log_tail()}")
        try:
            client.list_buckets()
            return client
        except Exception as e:  # not listening yet
            last = e
        time.sleep(0.5)
    d.stop()
    raise StartFailed(f"{NAME} not ready at {d.url} after {timeout:.0f}s ({last}); "
                      f"log {d.log_file}:\n{d.log_tail()}")


stop, status, url = managed(NAME)
