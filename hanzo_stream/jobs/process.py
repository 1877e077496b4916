"""Jobs as background processes, for `hanzo-stream local up` and the tests.

start() runs `python -m hanzo_stream.jobs.cli run NAME` in its own session with its own
log file and records its pid next to the job's state; stop() sends SIGTERM (the job stops
its queries and commits its last offsets), then SIGKILL after a grace period. A pid is
trusted only while /proc shows it still runs this job, so a reused pid is never signalled.

A job that ends on its own must not look like one that was stopped: the job writes its
exit code to exit.json (record_exit), stop() marks job.json as stopped, and status() says
`failed` for a job that is gone without either a clean --once exit or a stop.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from ..core import state


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


def scratch_dir(name: str, home: Path) -> Path:
    """Spark's local dir for the job (SPARK_LOCAL_DIRS). Spark deletes its scratch only on a
    clean exit; under /tmp, every killed job left ~670 MB of copied jars behind. Here the
    next start() empties it, so one job holds at most one run's worth."""
    return job_dir(name, home) / "scratch"


def log_file(name: str, home: Path) -> Path:
    return job_dir(name, home) / "job.log"


def _exit_file(name: str, home: Path) -> Path:
    return job_dir(name, home) / "exit.json"


def _read_json(f: Path) -> dict:
    try:
        return json.loads(f.read_text())
    except (OSError, ValueError):
        return {}


def record_exit(state_dir: Path, code: int, pid: int | None = None) -> None:
    """Written by the job as it exits (or by its parent, which saw it die): `status` reads it."""
    f = Path(state_dir) / "exit.json"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps({"code": code, "pid": pid or os.getpid(), "at": time.time()}))


class CheckpointBusy(RuntimeError):
    pass


def hold_checkpoint(state_dir: Path, name: str, checkpoint: str) -> IO[str]:
    """One run of a Spark job per state directory: two runs would write one checkpoint (and
    its sinks) at once. The lock lives as long as the returned file stays open, which is the
    run's process; kill -9 releases it too."""
    lock = Path(state_dir) / "run.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    f = open(lock, "a+")  # noqa: SIM115 (held open for the whole run)
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "?"
        f.close()
        raise CheckpointBusy(
            f"{name} already runs on this machine (pid {holder}) with the checkpoint {checkpoint}, "
            f"and a second run would write the same one. Stop that run first: `hanzo-stream local "
            f"stop {name}` if the local platform runs it, or Ctrl-C its `jobs run`") from None
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


def log_tail(name: str, home: Path, lines: int = 10, max_bytes: int = 64 * 1024) -> list[str]:
    """The last non-empty lines of the job's log (read from its end: logs grow large)."""
    try:
        with open(log_file(name, Path(home).resolve()), "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - max_bytes))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


_RAISED = re.compile(r"^\s*(?:Caused by: )?[\w.$]*(?:Error|Exception)\b[^:]*: \S")


def _last_error(tail: list[str]) -> str | None:
    """The line most likely to say why: the last exception raised (a Spark query's failure
    ends in a dump of its plan, hundreds of lines), else the last one naming an error, else
    the last line."""
    for line in reversed(tail):
        if _RAISED.match(line):
            return line.strip()
    for line in reversed(tail):
        if any(w in line for w in ("ERROR", "Error", "error:", "Exception", "Traceback")):
            return line
    return tail[-1] if tail else None


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
    scratch = scratch_dir(name, home)
    shutil.rmtree(scratch, ignore_errors=True)  # not running (checked above): its last run's
    scratch.mkdir()
    env = {**os.environ, "SPARK_LOCAL_DIRS": str(scratch), **conn_env, **(extra_env or {}),
           "HANZO_STREAM_HOME": str(home)}
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
    _exit_file(name, home).unlink(missing_ok=True)  # a previous run's exit says nothing now
    (d / "job.json").write_text(json.dumps({"pid": proc.pid, "started": time.time(), "cmd": cmd,
                                            "once": once}))
    # Until the child has exec'd, /proc shows our own command line; wait for it to be the job.
    deadline = time.monotonic() + 10
    code = None
    while not _alive(proc.pid, name) and (code := proc.poll()) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if code is not None and _read_json(_exit_file(name, home)).get("pid") != proc.pid:
        record_exit(d, code, proc.pid)  # poll() reaped it: keep its code for status()
    return proc.pid


def stop(name: str, home: Path, timeout: float = 60.0) -> bool:
    """Stop the job started in `home`: SIGTERM, then SIGKILL. True if it was running."""
    home = Path(home).resolve()
    pid = _read_pid(name, home)
    if not _alive(pid, name):
        return False
    assert pid is not None
    _mark_stopped(name, home)
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


def _mark_stopped(name: str, home: Path) -> None:
    f = job_dir(name, home) / "job.json"
    info = _read_json(f)
    if info:
        f.write_text(json.dumps(info | {"stopped": time.time()}))


def status(name: str, home: Path) -> dict:
    """running, pid and log; `state`: running, stopped, exited (a clean --once run), failed,
    or not started; a failed job also shows its exit code (None: killed) and why."""
    home = Path(home).resolve()
    info = _read_json(job_dir(name, home) / "job.json")
    pid = info.get("pid")
    out = {"running": _alive(pid, name), "pid": pid, "log": str(log_file(name, home))}
    if out["running"]:  # its session: the driver and the JVM it started (state.session_cpu)
        out["cpu_seconds"] = round(state.session_cpu(pid), 1)
    if out["running"] or not info:
        return out | {"state": "running" if out["running"] else "not started"}
    code = _exit_code(name, home, pid)
    if info.get("stopped"):
        return out | {"state": "stopped"}
    if code == 0 and info.get("once"):
        return out | {"state": "exited", "exit_code": 0}
    return out | {"state": "failed", "exit_code": code,
                  "last_log_line": _last_error(log_tail(name, home, 2000, 1024 * 1024))}


def _exit_code(name: str, home: Path, pid: int | None) -> int | None:
    """What the job recorded as it exited; else what waitpid says, if it was our child."""
    reaped = _reap(pid)
    recorded = _read_json(_exit_file(name, home))
    if recorded.get("pid") == pid:
        return recorded.get("code")
    if reaped is not None:
        record_exit(job_dir(name, home), reaped, pid)
    return reaped


def wait(name: str, home: Path, timeout: float) -> bool:
    """Wait for a job started with once=True to exit; True if it exited in time."""
    home = Path(home).resolve()
    pid = _read_pid(name, home)
    deadline = time.monotonic() + timeout
    while _alive(pid, name) and time.monotonic() < deadline:
        _exit_code(name, home, pid)
        time.sleep(0.3)
    _exit_code(name, home, pid)
    return not _alive(pid, name)


def _reap(pid: int | None) -> int | None:
    """Collect a child that exited (no zombie left); its exit code (-N: signal N), if ours."""
    if not pid:
        return None
    try:
        got, wstatus = os.waitpid(pid, os.WNOHANG)
    except (ChildProcessError, OSError):
        return None
    return os.waitstatus_to_exitcode(wstatus) if got == pid else None


def _kill_group_leftovers(pgid: int) -> None:
    """The Spark JVM is in the job's process group; make sure it does not outlive it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
