"""Where a run's time goes, per module: wall time, the CPU of what the module started, and how
long it waited. Every run writes it (bench/suite_profile.py renders docs/testing.md from it), and
each module's start is printed with the time since the session began, so a run CI cuts off
still says where it was.

The brokers, Spark drivers, kubelets and pods a module starts are not all its children
(daemons re-parent to init), so CPU is read from cgroups: tests/lanes.sh runs each lane in a
cpuacct cgroup of its own (HANZO_STREAM_LANE_CGROUP), which every process it starts stays in
however it detaches, and the session's Kubernetes node keeps its pods under a cgroup root
named after this process (hanzo_stream/kube/node.py), counted too. Without a lane cgroup (a
plain `pytest`), CPU is the machine's busy time while the module ran.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

OUT = Path(os.environ.get("HANZO_STREAM_SUITE_PROFILE",
                          Path(__file__).resolve().parents[1] / ".hanzo-stream" / "suite-profile"))
HZ = os.sysconf("SC_CLK_TCK")


CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def machine_cpu() -> float:
    """Busy CPU seconds of the whole machine since boot."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = (
            int(x) for x in f.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / HZ


class LaneCpu:
    """CPU seconds of the lane: its cgroup and the session node's pods. A cgroup that is gone
    (the node torn down) keeps the last value read, so no module's figure runs backwards."""

    def __init__(self, lane_cgroup: str | None) -> None:
        self.cgroups = [Path(lane_cgroup), CPUACCT / f"hanzo-kt{os.getpid()}"] if lane_cgroup else []
        self.last: dict[Path, float] = {}

    def __call__(self) -> float:
        if not self.cgroups:
            return machine_cpu()
        for g in self.cgroups:
            with contextlib.suppress(OSError, ValueError):
                self.last[g] = int((g / "cpuacct.usage").read_text()) / 1e9
        return sum(self.last.values())


def record_parts(what: str, components: dict[str, dict]) -> None:
    """The CPU seconds each long-running part used (their status' cpu_seconds: the local
    platform's components, the session node's daemons), beside the lanes' profiles: the CPU a
    module's background burns is in its row, this says whose it is."""
    parts = {n: c["cpu_seconds"] for n, c in components.items() if c.get("cpu_seconds")}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"parts-{what}.json").write_text(json.dumps(
        dict(sorted(parts.items(), key=lambda kv: -kv[1])), indent=1))


@dataclass
class Module:
    wall: float = 0.0
    cpu: float = 0.0  # the lane's (LaneCpu)
    tests: dict[str, float] = field(default_factory=dict)  # test id -> set-up + call + tear-down
    outcomes: dict[str, int] = field(default_factory=dict)


class Profile:
    """A pytest plugin: one Module per test module, written as JSON at the end of the run."""

    def __init__(self, lane: str, lane_cgroup: str | None) -> None:
        self.lane = lane
        self.cpu = LaneCpu(lane_cgroup)
        self.modules: dict[str, Module] = {}
        self.current: str | None = None
        self.mark: tuple[float, float] = (0.0, 0.0)
        self.started = time.monotonic()
        self.machine_started = machine_cpu()  # the whole machine: every lane, builds, all
        self.reporter = None

    def _sample(self) -> tuple[float, float]:
        return time.monotonic(), self.cpu()

    def _close(self) -> None:
        if self.current is None:
            return
        now = self._sample()
        m = self.modules.setdefault(self.current, Module())
        m.wall += now[0] - self.mark[0]
        m.cpu += now[1] - self.mark[1]
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
                terminalreporter.write_line(f"{m.wall:8.1f} s  cpu {m.cpu:7.1f} s  {name}")
        wall, busy = time.monotonic() - self.started, machine_cpu() - self.machine_started
        terminalreporter.write_line(f"the machine: {busy:,.0f} CPU-s busy of {wall * os.cpu_count():,.0f} "
                                    f"({busy / (wall * os.cpu_count()):.0%}; near 100%: CPU-bound)")
        OUT.mkdir(parents=True, exist_ok=True)
        doc = {"lane": self.lane, "cores": os.cpu_count(), "cgroup": bool(self.cpu.cgroups),
               "wall": wall, "machine_cpu": busy,
               "finished": time.time(), "modules": {k: asdict(v) for k, v in self.modules.items()}}
        (OUT / f"{self.lane}.json").write_text(json.dumps(doc, indent=1))

