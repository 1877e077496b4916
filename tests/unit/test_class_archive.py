"""The local drivers' class archive: named for the JDK and the jars it was made from, used
only once it exists (a driver never waits for it or fails without it)."""

from __future__ import annotations

import os

import pytest

from hanzo_stream.jobs import class_archive


@pytest.fixture
def machine(tmp_path, monkeypatch):
    java, jars = tmp_path / "java", [tmp_path / "spark-core.jar", tmp_path / "scala-library.jar"]
    for f in (java, *jars):
        f.write_bytes(b"v1")
    monkeypatch.setenv("HANZO_STREAM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(class_archive, "_java", lambda: java)
    monkeypatch.setattr(class_archive, "_spark_jars", lambda: jars)
    return java, jars


def test_a_new_jdk_or_spark_jar_names_a_new_archive(machine):
    java, jars = machine
    first = class_archive.path()
    assert first.parent == class_archive.cache_dir() / "cds" and first.suffix == ".jsa"
    assert class_archive.path() == first
    jars[1].write_bytes(b"v2, longer")
    second = class_archive.path()
    java.write_bytes(b"a newer jdk")
    assert len({first, second, class_archive.path()}) == 3


def test_flags_map_the_archive_only_once_it_exists(machine):
    assert class_archive.flags() == []
    p = class_archive.path()
    p.parent.mkdir(parents=True)
    p.write_bytes(b"")
    assert class_archive.flags() == [f"-XX:SharedArchiveFile={p}"]


def test_build_keeps_an_existing_archive_and_says_why_when_training_fails(machine, monkeypatch):
    p = class_archive.path()
    p.parent.mkdir(parents=True)
    stale = p.with_name("spark-0123.jsa")
    stale.write_bytes(b"old")
    monkeypatch.setattr(class_archive, "__name__", "no_such_module_for_training")
    with pytest.raises(RuntimeError, match="class archive was not made .exit 1.*no_such_module"):
        class_archive.build(timeout=60)
    assert not stale.exists() and not p.exists() and not list(p.parent.glob("*.partial"))
    p.write_bytes(b"made")
    assert class_archive.build() == p and p.read_bytes() == b"made"
    assert os.environ["HANZO_STREAM_CACHE"] in str(p)
