"""Where a run's time goes, per module: wall time, the CPU of what the module started, and how
long it waited. Every run writes it (bench/suite_profile.py renders docs/testing.md from it), and
each module's start is printed with the time since the session began, so a run CI cuts off
still says where it was.

CPU is read machine-wide from /proc/stat, not per process: the brokers, Spark drivers,
kubelets and pods a module starts are not all its children (containerd's shims are re-parented
to init). The lanes keep the figures apart by priority: the integration lane runs at nice 0,
the unit lane and the background Go builds at nice 10, which /proc/stat counts as `nice`. So an
integration module's CPU is the machine's un-niced busy time while it ran, and a unit module's
is its own process's with its children's (rusage), as nothing else runs un-niced beside it.
"""

from __future__ import annotations

import json
import os
import resource
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

OUT = Path(os.environ.get("HANZO_STREAM_SUITE_PROFILE",
                          Path(__file__).resolve().parents[1] / ".hanzo-stream" / "suite-profile"))
HZ = os.sysconf("SC_CLK_TCK")


def machine_cpu() -> tuple[float, float]:
    """(un-niced busy, niced busy) CPU seconds of the whole machine since boot."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = (
            int(x) for x in f.readline().split()[1:9])
    return (user + system + irq + softirq + steal) / HZ, nice / HZ


def own_cpu() -> float:
    """CPU seconds of this process and the children it has reaped."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


@dataclass
class Module:
    wall: float = 0.0
    machine_cpu: float = 0.0  # un-niced, machine-wide
    niced_cpu: float = 0.0
    own_cpu: float = 0.0
    tests: dict[str, float] = field(default_factory=dict)  # test id -> set-up + call + tear-down
    outcomes: dict[str, int] = field(default_factory=dict)


class Profile:
    """A pytest plugin: one Module per test module, written as JSON at the end of the run."""

    def __init__(self, lane: str) -> None:
        self.lane = lane
        self.modules: dict[str, Module] = {}
        self.current: str | None = None
        self.mark: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
        self.started = time.monotonic()
        self.reporter = None

    def _sample(self) -> tuple[float, float, float, float]:
        return (time.monotonic(), *machine_cpu(), own_cpu())

    def _close(self) -> None:
        if self.current is None:
            return
        now = self._sample()
        m = self.modules.setdefault(self.current, Module())
        m.wall += now[0] - self.mark[0]
        m.machine_cpu += now[1] - self.mark[1]
        m.niced_cpu += now[2] - self.mark[2]
        m.own_cpu += now[3] - self.mark[3]
        self.mark = now

    def pytest_sessionstart(self, session) -> None:
        self.reporter = session.config.pluginmanager.get_plugin("terminalreporter")

    def pytest_runtest_logstart(self, nodeid: str, location) -> None:
        module = nodeid.split("::")[0]
        if module == self.current:
            return
        self._close()
        self.current, self.mark = module, self._sample()
        if self.reporter is not None:
            self.reporter.write("\n")  # after the progress dots of the module before
            self.reporter.write_line(f"[{self.mark[0] - self.started:6.0f} s] {module}")

    def pytest_runtest_logreport(self, report) -> None:
        m = self.modules.setdefault(report.nodeid.split("::")[0], Module())
        m.tests[report.nodeid] = m.tests.get(report.nodeid, 0.0) + report.duration
        if report.when == "call" or report.outcome != "passed":
            m.outcomes[report.outcome] = m.outcomes.get(report.outcome, 0) + 1

    def pytest_terminal_summary(self, terminalreporter) -> None:
        self._close()
        self.current = None
        slow = sorted(self.modules.items(), key=lambda kv: -kv[1].wall)[:15]
        if slow:
            terminalreporter.write_sep("=", "slowest modules (wall time, set-up and tear-down "
                                            "included; CPU: see tests/suite_profile.py)")
            for name, m in slow:
                cpu = m.machine_cpu if self.lane == "integration" else m.own_cpu
                terminalreporter.write_line(f"{m.wall:8.1f} s  cpu {cpu:7.1f} s  {name}")
        OUT.mkdir(parents=True, exist_ok=True)
        doc = {"lane": self.lane, "cores": os.cpu_count(), "wall": time.monotonic() - self.started,
               "finished": time.time(), "modules": {k: asdict(v) for k, v in self.modules.items()}}
        (OUT / f"{self.lane}.json").write_text(json.dumps(doc, indent=1))

