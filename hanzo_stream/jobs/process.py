"""Jobs as background processes, for `hanzo-stream local up` and the tests.

start() runs `python -m hanzo_stream.jobs.cli run NAME` in its own session with its own
log file and records its pid next to the job's state; stop() sends SIGTERM (the job stops
its queries and commits its last offsets), then SIGKILL after a grace period. A pid is
trusted only while /proc shows it still runs this job, so a reused pid is never signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path


def job_dir(name: str, home: Path) -> Path:
    return Path(home) / "jobs" / name


def _marker(name: str) -> list[str]:
    return ["hanzo_stream.jobs.cli", "run", name]


def _alive(pid: int | None, name: str) -> bool:
    if not pid:
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    args = [a.decode(errors="replace") for a in argv]
    marker = _marker(name)
    return any(args[i:i + len(marker)] == marker for i in range(len(args)))


def _read_pid(name: str, home: Path) -> int | None:
    f = job_dir(name, home) / "job.json"
    if not f.exists():
        return None
    return json.loads(f.read_text()).get("pid")


def log_file(name: str, home: Path) -> Path:
    return job_dir(name, home) / "job.log"


def start(name: str, home: Path, conn_env: Mapping[str, str], *, once: bool = False,
          registry: Path = Path("topics.yaml"), consumers: Path = Path("consumers"),
          cwd: Path | None = None, extra_env: Mapping[str, str] | None = None) -> int:
    """Start job `name` in the background (idempotent: returns the running pid if any).

    conn_env: HANZO_STREAM_* variables naming the cluster; the job finds its own principal's
    password (HANZO_STREAM_PASSWORD_<P>, or <home>/credentials.json).
    """
    home = Path(home).resolve()
    running = _read_pid(name, home)
    if _alive(running, name):
        assert running is not None
        return running
    d = job_dir(name, home)
    d.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **conn_env, **(extra_env or {}), "HANZO_STREAM_HOME": str(home)}
    # The child imports the same hanzo_stream as this process, whatever pip installed.
    pkg_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [pkg_root, env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", *_marker(name), "--registry", str(Path(registry).resolve()),
           "--consumers", str(Path(consumers).resolve())]
    if once:
        cmd.append("--once")
    with open(log_file(name, home), "ab") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env,
                                cwd=str(cwd or Path.cwd()), start_new_session=True)
    (d / "job.json").write_text(json.dumps({"pid": proc.pid, "started": time.time(), "cmd": cmd}))
    # Until the child has exec'd, /proc shows our own command line; wait for it to be the job.
    deadline = time.monotonic() + 10
    while not _alive(proc.pid, name) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc.pid


def stop(name: str, home: Path, timeout: float = 60.0) -> bool:
    """Stop the job started in `home`: SIGTERM, then SIGKILL. True if it was running."""
    home = Path(home).resolve()
    pid = _read_pid(name, home)
    if not _alive(pid, name):
        return False
    assert pid is not None
    os.kill(pid, signal.SIGTERM)  # the driver stops its queries; its JVM exits with it
    deadline = time.monotonic() + timeout
    while _alive(pid, name) and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.2)
    if _alive(pid, name):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    _reap(pid)
    _kill_group_leftovers(pid)
    return True


def kill(name: str, home: Path) -> bool:
    """SIGKILL the job and its JVM at once: what a crash looks like (used by tests)."""
    pid = _read_pid(name, Path(home).resolve())
    if not _alive(pid, name):
        return False
    assert pid is not None
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    _reap(pid)
    return True


def status(name: str, home: Path) -> dict:
    home = Path(home).resolve()
    pid = _read_pid(name, home)
    return {"running": _alive(pid, name), "pid": pid, "log": str(log_file(name, home))}


def wait(name: str, home: Path, timeout: float) -> bool:
    """Wait for a job started with once=True to exit; True if it exited in time."""
    pid = _read_pid(name, Path(home).resolve())
    deadline = time.monotonic() + timeout
    while _alive(pid, name) and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.3)
    _reap(pid)
    return not _alive(pid, name)


def _reap(pid: int | None) -> None:
    if pid:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def _kill_group_leftovers(pgid: int) -> None:
    """The Spark JVM is in the job's process group; make sure it does not outlive it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
