"""The package's layers (docs/architecture.md): the floor imports nothing above it, the jobs
never import the local platform or the Kubernetes node, and only the CLIs reach the CLI layer.
Read from the source (every `import`, lazy ones inside functions too)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "hanzo_stream"
FLOOR = {"artifacts", "core", "registry", "schemas", "client", "pods"}


def layer_imports(path: Path) -> tuple[str, set[str]]:
    """The module's name and the top-level parts of hanzo_stream it imports."""
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    package = parts if path.name == "__init__.py" else parts[:-1]
    if path.name == "__init__.py":
        parts = parts[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - (node.level - 1)] if node.level else []
            target = [*base, *(node.module.split(".") if node.module else [])]
            names = [target + [a.name] for a in node.names] if len(target) == 1 else [target]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names]
        else:
            continue
        for n in names:
            if n[0] == "hanzo_stream" and len(n) > 1:
                found.add(n[1])
    return ".".join(parts), found


def modules() -> list[tuple[str, set[str]]]:
    return [layer_imports(p) for p in sorted(PKG.rglob("*.py"))]


def test_the_floor_imports_nothing_above_it():
    wrong = {}
    for name, imports in modules():
        layer = name.split(".")[1] if "." in name else ""
        if layer in FLOOR and not name.endswith(".cli"):
            above = imports - FLOOR - {layer}
            if above:
                wrong[name] = sorted(above)
    assert not wrong, wrong


def test_the_jobs_never_import_the_local_platform_or_the_node():
    wrong = {name: sorted(imps & {"local", "kube", "cli"}) for name, imps in modules()
             if name.startswith("hanzo_stream.jobs") and imps & {"local", "kube", "cli"}}
    assert not wrong, wrong


def test_the_analysis_sees_imports():
    name, imports = layer_imports(PKG / "jobs" / "s3.py")
    assert name == "hanzo_stream.jobs.s3" and imports == {"core"}
    # A lazy import inside a function counts: platform.py imports the jobs' s3 in one.
    assert layer_imports(PKG / "local" / "platform.py")[1] >= {"jobs", "core", "artifacts", "local"}
