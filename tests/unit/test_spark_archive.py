"""The local Spark drivers' class archive (hanzo_stream/artifacts/jvm.py): named for the java binary
and the jars it was made from, used only in the quick mode and once it exists (a driver never
waits for it or fails without it)."""

from __future__ import annotations

import pytest

from hanzo_stream.artifacts import jvm
from hanzo_stream.jobs import spark_archive


@pytest.fixture
def machine(tmp_path, monkeypatch):
    java, jars = tmp_path / "java", [tmp_path / "spark-core.jar", tmp_path / "scala-library.jar"]
    for f in (java, *jars):
        f.write_bytes(b"v1")
    monkeypatch.setenv("HANZO_STREAM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(jvm, "_java_binary", lambda: java)
    monkeypatch.setattr(spark_archive, "spark_jars", lambda: jars)
    return java, jars


def _path():
    return jvm.archive_path(spark_archive.NAME, spark_archive.spark_jars())


def test_a_new_jdk_or_spark_jar_names_a_new_archive(machine):
    java, jars = machine
    first = _path()
    assert first.parent == jvm.cache_dir() / "cds" and first.name.startswith("spark-")
    assert _path() == first
    jars[1].write_bytes(b"v2, longer")
    second = _path()
    java.write_bytes(b"a newer jdk")
    assert len({first, second, _path()}) == 3


def test_flags_map_the_archive_once_it_exists_and_only_in_the_quick_mode(machine):
    assert spark_archive.flags({}) == []
    p = _path()
    p.parent.mkdir(parents=True)
    p.write_bytes(b"")
    assert spark_archive.flags({}) == [f"-XX:SharedArchiveFile={p}"]
    assert spark_archive.flags({jvm.JIT_ENV: "full"}) == []  # as production runs: bench/


def test_build_keeps_an_existing_archive_and_says_why_when_training_fails(machine):
    p = _path()
    p.parent.mkdir(parents=True)
    stale = p.with_name("spark-0123.jsa")
    stale.write_bytes(b"another jdk's")
    with pytest.raises(RuntimeError, match=r"spark class archive was not made \(exit 1\).*no_such_trainer"):
        jvm.build_archive(spark_archive.NAME, spark_archive.spark_jars(), "no_such_trainer", timeout=60)
    assert not stale.exists() and not p.exists() and not list(p.parent.glob("*.partial"))
    p.write_bytes(b"made")
    assert spark_archive.build() == p and p.read_bytes() == b"made"
