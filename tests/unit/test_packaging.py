"""What an index page and a type checker read from the package: metadata that points somewhere,
a readme that ships, and `py.typed` among the package's data."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_metadata_an_index_page_shows():
    project = PROJECT["project"]
    assert (ROOT / project["readme"]).is_file()
    assert {"Homepage", "Repository", "Issues", "Documentation"} <= set(project["urls"])
    assert all(u.startswith("https://github.com/hanzoai/hanzo-stream") for u in project["urls"].values())
    python = [c for c in project["classifiers"] if c.startswith("Programming Language :: Python :: 3.")]
    floor = project["requires-python"].removeprefix(">=")
    assert python and min(c.rsplit(" ", 1)[1] for c in python) == floor  # what is claimed is run
    assert "Typing :: Typed" in project["classifiers"]


def test_py_typed_ships_with_the_package():
    assert (ROOT / "hanzo_stream" / "py.typed").is_file()
    assert "py.typed" in PROJECT["tool"]["setuptools"]["package-data"]["hanzo_stream"]
