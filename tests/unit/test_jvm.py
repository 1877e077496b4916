"""Every local JVM starts through hanzo_stream/artifacts/jvm.py: one java, one JIT choice."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from hanzo_stream.artifacts import jvm

ROOT = Path(__file__).resolve().parents[2]


def test_quick_by_default_full_on_request_and_a_typo_is_named():
    assert jvm.jit_flags({}) == ["-XX:TieredStopAtLevel=1"]
    assert jvm.jit_flags({"HANZO_STREAM_LOCAL_JIT": "quick"}) == ["-XX:TieredStopAtLevel=1"]
    assert jvm.jit_flags({"HANZO_STREAM_LOCAL_JIT": "full"}) == []
    with pytest.raises(jvm.JitModeError, match="'fast': use 'quick'.*or 'full'"):
        jvm.jit_flags({"HANZO_STREAM_LOCAL_JIT": "fast"})


def test_java_is_java_homes_when_set(monkeypatch):
    monkeypatch.setenv("JAVA_HOME", "/opt/jdk")
    assert jvm.java() == "/opt/jdk/bin/java"
    monkeypatch.delenv("JAVA_HOME")
    assert jvm.java() == "java"


def test_no_local_jvm_is_started_without_the_local_jit():
    """A `java` command written in the package outside jvm.py would miss the JIT choice."""
    offenders = []
    for path in sorted((ROOT / "hanzo_stream").rglob("*.py")):
        if path.name == "jvm.py" or "kube" in path.parts:  # images run production's JVMs
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.List) and node.elts and isinstance(node.elts[0], ast.Constant) \
                    and node.elts[0].value == "java":
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.FunctionDef) and node.name == "_java":
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} defines {node.name}()")
    assert not offenders, offenders


def test_benchmarks_measure_production_jit():
    import subprocess
    import sys

    code = "import os, report; print(os.environ['HANZO_STREAM_LOCAL_JIT'])"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT / "bench",
                         env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "full", out.stderr
