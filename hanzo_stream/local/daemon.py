"""A background process the local platform started, remembered across CLI invocations.

`local up` and `local down` run in different processes, so the pid, port and URL go to
<home>/<name>.json. A pid only counts as ours while its command line still contains the
marker (a path under <home>), so a reused pid is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from ..core import state


class StartFailed(RuntimeError):
    pass


@dataclass
class Daemon:
    home: Path
    name: str
    pid: int | None = None
    port: int | None = None
    url: str | None = None
    extra: dict = field(default_factory=dict)
    _proc: subprocess.Popen | None = field(default=None, repr=False, compare=False)

    @property
    def state_file(self) -> Path:
        return state.record_file(self.home, self.name)

    @property
    def log_file(self) -> Path:
        return self.home / f"{self.name}.log"

    @property
    def marker(self) -> str:
        return str(self.home)

    @classmethod
    def load(cls, home: Path, name: str) -> Daemon:
        d = cls(home, name)
        if data := state.read_record(home, name):
            d.pid, d.port, d.url, d.extra = data["pid"], data["port"], data["url"], data["extra"]
        return d

    def save(self) -> None:
        state.write_record(self.home, self.name, self.pid, self.port, self.url, self.extra)

    def alive(self) -> bool:
        if not self.pid:
            return False
        if self._proc is not None and self._proc.pid == self.pid:
            # Our own child: ask the kernel directly. (Just after exec, /proc/<pid>/cmdline
            # can still read empty while the new image sets up its arguments.)
            return self._proc.poll() is None
        return state.pid_alive(self.pid, self.marker)

    def spawn(self, argv: Sequence[str], env: Mapping[str, str] | None = None,
              stdin: bytes | None = None) -> None:
        """Start argv detached (own session, output to the log file). argv must contain the marker.

        stdin: bytes written to the process' standard input, then closed: how a secret reaches
        a server that reads its configuration from a file (`--properties /dev/stdin`) without
        the secret ever being written to disk or shown in `ps`.
        """
        if not any(self.marker in a for a in argv):
            raise ValueError(f"{self.name}: the command line must name {self.marker}")
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as out:
            proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                                    env=dict(env) if env else None, start_new_session=True)
        if stdin is not None:
            assert proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(stdin)
            proc.stdin.close()
        self.pid, self._proc = proc.pid, proc
        self.save()

    def wait_http(self, url: str, timeout: float) -> None:
        """Until `url` answers 200; fails fast (with the log's tail) if the process died."""
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if not self.alive():
                raise StartFailed(f"{self.name} exited during start-up; log {self.log_file}:\n"
                                  + self.log_tail())
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError) as e:
                last = str(e)
            time.sleep(0.3)
        raise StartFailed(f"{self.name} not ready at {url} after {timeout:.0f}s ({last}); "
                          f"log {self.log_file}:\n{self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_file.read_text(errors="replace")[-chars:] if self.log_file.exists() else ""

    def stop(self, timeout: float = 15.0, sig: int = signal.SIGTERM) -> bool:
        """`sig` (SIGTERM), then SIGKILL after `timeout`. True if it was running."""
        if not self.alive():
            return False
        assert self.pid is not None
        os.kill(self.pid, sig)
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, os.WNOHANG)
            time.sleep(0.1)
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, os.WNOHANG)
        self.pid = None
        self.save()
        return True

    def status(self) -> dict:
        alive = self.alive()
        return {"running": alive, "pid": self.pid if alive else None,
                "cpu_seconds": round(state.session_cpu(self.pid), 1) if alive and self.pid else None,
                "url": self.url, "log": str(self.log_file)}


class Managed(NamedTuple):
    """What each local component module offers its callers for its daemon:
    `stop, status, url = managed(NAME)`, then `object_store.stop(home)`."""

    stop: Callable[[Path], bool]  # stop it if it runs; True if it did
    status: Callable[[Path], dict]
    url: Callable[[Path], str | None]  # None unless it runs


def managed(name: str, sig: int = signal.SIGTERM) -> Managed:
    """stop/status/url of the daemon `name` under a home directory, written once; `sig` is
    what asks it to stop (SIGKILL follows after Daemon.stop's timeout)."""

    def stop(home: Path) -> bool:
        return Daemon.load(home, name).stop(sig=sig)

    def status(home: Path) -> dict:
        return Daemon.load(home, name).status()

    def url(home: Path) -> str | None:
        d = Daemon.load(home, name)
        return d.url if d.alive() else None

    return Managed(stop, status, url)
