"""Shared test set-up: the repository root and the HIP registry."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from hanzo_stream.registry import Registry, load_registry

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def registry() -> Registry:
    return load_registry(ROOT / "topics.yaml")


def pytest_collection_modifyitems(config, items) -> None:
    """Everything under tests/integration is `integration` (real services, Java), whether or
    not its module says so: `pytest -m "not integration"` runs without Java. The real
    Kubernetes tests (test_kube_<n>_*.py) last: on a cold CI machine the Go builds they need run
    beside the rest of the suite (.ci/install-kube.sh), and the rest needs none of them. The
    images' own tests (test_kube_images.py) need only the images, which are built in minutes,
    so they run in their place and not on the critical path."""
    for item in items:
        if item.path.parent.name == "integration":
            item.add_marker(pytest.mark.integration)
    items.sort(key=lambda item: item.path.parent.name == "integration" and
               re.match(r"test_kube_\d", item.path.name) is not None)


# Where a run's time goes, also when CI cuts it off: each module's start is printed with the
# time since the session began, and the modules' wall times at the end.
_clock: dict = {"module": None}
_modules: dict[str, float] = {}


def pytest_sessionstart(session) -> None:
    _clock.update(session=time.monotonic(),
                  reporter=session.config.pluginmanager.get_plugin("terminalreporter"))


def _close_module(now: float) -> None:
    if _clock["module"]:
        _modules[_clock["module"]] = _modules.get(_clock["module"], 0.0) + now - _clock["since"]


def pytest_runtest_logstart(nodeid: str, location) -> None:
    module = nodeid.split("::")[0]
    if _clock["module"] == module:
        return
    now = time.monotonic()
    _close_module(now)
    _clock.update(module=module, since=now)
    if _clock.get("reporter") is not None:
        _clock["reporter"].write("\n")  # after the progress dots of the module before
        _clock["reporter"].write_line(f"[{now - _clock['session']:6.0f} s] {module}")


def pytest_terminal_summary(terminalreporter) -> None:
    _close_module(time.monotonic())
    slow = sorted(_modules.items(), key=lambda kv: -kv[1])[:15]
    if slow:
        terminalreporter.write_sep("=", "slowest modules (wall time, set-up and tear-down included)")
        for module, seconds in slow:
            terminalreporter.write_line(f"{seconds:8.1f} s  {module}")
