"""Shared test set-up: the repository root and the HIP registry."""

from __future__ import annotations

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
    Kubernetes tests last: on a cold CI machine their builds run beside the rest of the suite
    (.ci/install-kube.sh), and the rest needs none of them."""
    for item in items:
        if item.path.parent.name == "integration":
            item.add_marker(pytest.mark.integration)
    items.sort(key=lambda item: item.path.name.startswith("test_kube_") and
               item.path.parent.name == "integration")
