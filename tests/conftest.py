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
