"""The java command every JVM of this machine's platform starts with: one place for the JIT.

The local platform's JVMs (brokers, Kafka's tools, the schema registry, s3proxy, the local
Spark drivers) run on a developer's machine and in the test suite, where each lives for
minutes and most of its CPU goes to compiling itself. With C1 only
(`-XX:TieredStopAtLevel=1`) three brokers started, took topics.yaml and idled 30 s on
69 -> 38 CPU-seconds (ready in 24 -> 15 s), and a Spark session's start 27 -> 16 (measured on
this machine's 2 cores, docs/local-platform.md). Benchmarks measure what production runs,
so bench/ sets HANZO_STREAM_LOCAL_JIT=full. Pods get it only as the local Kubernetes
stacks' javaOptions (hanzo_stream/kube/deploy.py); other stacks run the JVMs' defaults.

In the same quick mode a local Spark driver maps the classes it loads at start from a
class-data archive (AppCDS) instead of reading and verifying them out of PySpark's jars each
time (jobs/spark_archive.py: a session's start 16.5 -> 5.8 s on this machine). An archive is
made once, by `python -m hanzo_stream.local.install`, into the cache, and named for the java
binary and the jars it was made from; a JVM without it, or with one it finds unusable (it says
so), starts as before. Kafka's JVMs gained nothing measurable from one (three brokers: the
same CPU to ready, the same 2.7 CPU-seconds per storage format), so they have none.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..core.paths import cache_dir

JIT_ENV = "HANZO_STREAM_LOCAL_JIT"
QUICK = ("-XX:TieredStopAtLevel=1",)
ARCHIVE_FORMAT = 1  # part of every archive's name: bump when a training changes
MODES = {"quick": QUICK, "full": ()}


class JitModeError(ValueError):
    pass


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    return str(Path(home, "bin", "java")) if home else "java"


def jit_flags(env: dict[str, str] | None = None) -> list[str]:
    """The JIT flags of a local JVM: C1 only unless HANZO_STREAM_LOCAL_JIT=full."""
    mode = (os.environ if env is None else env).get(JIT_ENV, "quick")
    if mode not in MODES:
        raise JitModeError(f"{JIT_ENV}={mode!r}: use 'quick' (C1 only, the default) or 'full' "
                           "(C1 and C2, as production runs)")
    return list(MODES[mode])


def _java_binary() -> Path:
    """The file java() runs (an archive is only valid for the JVM that made it)."""
    return Path(shutil.which(java()) or java()).resolve()


def archive_path(name: str, jars: Sequence[Path]) -> Path:
    """Where the archive of `name` for this java and these jars is (made or not)."""
    h = hashlib.sha256(f"{ARCHIVE_FORMAT}\n".encode())
    for f in (_java_binary(), *sorted(jars)):
        st = f.stat()
        h.update(f"{f}\t{st.st_size}\t{st.st_mtime_ns}\n".encode())
    return cache_dir() / "cds" / f"{name}-{h.hexdigest()[:20]}.jsa"


def archive_flags(name: str, jars: Sequence[Path], env: dict[str, str] | None = None) -> list[str]:
    """The flag that maps the archive, in the quick mode and once build_archive() made it."""
    if not jit_flags(env):
        return []
    p = archive_path(name, jars)
    return [f"-XX:SharedArchiveFile={p}"] if p.exists() else []


def dump_flags(out: str) -> list[str]:
    """A trainer's JVM: write the classes it loaded to `out` as it exits (quietly: the dump
    lists every class it cannot keep)."""
    return [f"-XX:ArchiveClassesAtExit={out}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def build_archive(name: str, jars: Sequence[Path], trainer: str, timeout: float = 600) -> Path:
    """Make `name`'s archive once: `python -m trainer OUT WORK` runs the JVM(s) through their
    usual work (files under the directory WORK) with dump_flags(OUT), and waits for them to exit."""
    dest = archive_path(name, jars)
    if dest.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    for old in dest.parent.glob(f"{name}-*.jsa"):  # another java's or jars'
        old.unlink(missing_ok=True)
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}.partial")
    with tempfile.TemporaryDirectory(prefix="hanzo-stream-cds-") as work:
        done = subprocess.run([sys.executable, "-m", trainer, str(tmp), work],
                              capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0 or not tmp.exists():
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"the {name} class archive was not made (exit {done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()[-800:]}")
    tmp.rename(dest)
    return dest
