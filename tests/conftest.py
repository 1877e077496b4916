"""Shared test set-up: the repository root and the HIP registry."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hanzo_stream.registry import Registry, load_registry

from .suite_profile import Profile

ROOT = Path(__file__).resolve().parent.parent
# How long the first Kubernetes test may wait, beyond its own timeout, for the Go builds that a
# cold CI machine runs beside the suite: measured 2,276 s from the start on an idle machine,
# 3,173 s on a loaded one (docs/testing.md); a slower machine finishes late rather than red.
BUILD_WAIT = 3600


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def registry() -> Registry:
    return load_registry(ROOT / "topics.yaml")


def pytest_collection_modifyitems(config, items) -> None:
    """Everything under tests/integration is `integration` (real services, Java), whether or
    not its module says so: `pytest -m "not integration"` runs without Java. The real
    Kubernetes tests (test_kube_*.py, the images' too: they run in the session node's
    containerd) last: on a cold CI machine the Go builds they need run beside the rest of the
    suite (.ci/install-kube.sh), and the rest needs none of them; the node starts with the
    first of them, so its control plane idles beside nothing else."""
    for item in items:
        if item.path.parent.name == "integration":
            item.add_marker(pytest.mark.integration)
    items.sort(key=lambda item: item.path.parent.name == "integration" and
               item.path.name.startswith("test_kube_"))
    kube = [item for item in items if item.path.parent.name == "integration" and
            item.path.name.startswith("test_kube_")]
    if kube:  # its set-up waits for those builds (hanzo_stream/kube/build.py:bin_dir's lock)
        own = kube[0].get_closest_marker("timeout")
        kube[0].add_marker(pytest.mark.timeout(
            float(own.args[0] if own else config.getini("timeout")) + BUILD_WAIT))


def pytest_configure(config) -> None:
    """Where a run's time goes, per module (tests/suite_profile.py); tests/lanes.sh names the
    lane and its cgroup."""
    config.pluginmanager.register(Profile(os.environ.get("HANZO_STREAM_LANE") or "adhoc",
                                          os.environ.get("HANZO_STREAM_LANE_CGROUP")),
                                  "suite-profile")
