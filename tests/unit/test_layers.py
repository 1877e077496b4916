"""The package's rooms and their layers (docs/architecture.md, "Rooms").

Every module lives in a room, a package named for what it holds; only the command line
(cli.py, cli_common.py, __main__.py) stays at the top. A room imports its own modules and the
rooms of lower layers, never one of its own layer or above: the core model imports no other
room, the jobs never the local platform or the Kubernetes node. A room's cli.py also reaches the
command line's shared part (cli_common). And no two rooms import each other, directly or round
a cycle, whatever their layers. Read from the source (every `import`, lazy ones inside
functions too).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "hanzo_stream"
# Lowest first. A room may import the rooms of the layers before its own.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("core", "registry"),            # the core model: reaching a cluster, the broker, the registry
    ("artifacts", "schemas"),        # what is fetched and pinned; the schemas and their validator
    ("client", "pods"),              # the producer library; what runs in the cluster's pods
    ("reconcile",),                  # observe, plan, apply
    ("jobs",),                       # the consumer-group jobs
    ("monitoring",),                 # rules, alerts, dashboards, exporters
    ("local",),                      # the platform as local processes
    ("kube",),                       # a real single-node Kubernetes, on the local platform
    ("cli_common",),                 # the command line: what every command shares,
    ("cli",),                        # `hanzo-stream`, which mounts each room's commands,
    ("__main__",),                   # and `python -m hanzo_stream`
)
RANK = {part: i for i, layer in enumerate(LAYERS) for part in layer}
TOP = {"__init__", "__main__", "cli", "cli_common"}  # the modules outside a room


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


def part_of(name: str) -> str:
    """The room (or top-level module) a module belongs to: hanzo_stream.pods.roller -> pods."""
    return name.split(".")[1] if "." in name else "__init__"


def part_graph() -> dict[str, dict[str, set[str]]]:
    """part -> part it imports -> the modules of the first that import the second."""
    graph: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for name, imports in modules():
        for imported in imports - {part_of(name)}:
            graph[part_of(name)][imported].add(name)
    return graph


def ties(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every set of parts that import each other, directly or round a cycle (each a cycle's
    members, sorted): the strongly connected components of more than one part."""
    reach: dict[str, set[str]] = {}

    def reachable(a: str) -> set[str]:
        if a not in reach:
            seen, todo = set(), [a]
            while todo:
                for b in edges.get(todo.pop(), ()):
                    if b not in seen:
                        seen.add(b)
                        todo.append(b)
            reach[a] = seen
        return reach[a]

    out: list[list[str]] = []
    for a in sorted(edges):
        group = sorted({a} | {b for b in reachable(a) if a in reachable(b)})
        if len(group) > 1 and group not in out:
            out.append(group)
    return out


def test_every_module_lives_in_a_room():
    loose = {p.stem for p in PKG.glob("*.py")} - TOP
    rooms = {p.parent.relative_to(PKG).parts[0] for p in PKG.rglob("*.py") if p.parent != PKG}
    assert not loose, f"move these into a room (a package named for what it holds): {sorted(loose)}"
    unplaced = rooms - set(RANK)
    assert not unplaced, f"place these rooms in LAYERS (and docs/architecture.md): {sorted(unplaced)}"


def test_no_two_rooms_import_each_other():
    graph = part_graph()
    found = ties({a: set(bs) for a, bs in graph.items()})
    described = []
    for group in found:
        edges = [f"{a} -> {b} ({', '.join(sorted(graph[a][b]))})"
                 for a in group for b in group if b in graph.get(a, {})]
        described.append(" ↔ ".join(group) + ": " + "; ".join(edges))
    assert not found, "rooms tied to each other; move what both need to the lower one:\n  " + \
        "\n  ".join(described)


def test_each_room_imports_only_lower_layers():
    wrong = {}
    for name, imports in modules():
        part = part_of(name)
        if part == "__init__":
            assert not imports, f"hanzo_stream/__init__.py imports {imports}"
            continue
        allowed = {p for p, r in RANK.items() if r < RANK[part]} | {part}
        if name.endswith(".cli"):  # a room's commands share the command line's consoles and exits
            allowed.add("cli_common")
        if imports - allowed:
            wrong[name] = sorted(imports - allowed)
    assert not wrong, f"imports above their layer (LAYERS): {wrong}"


def test_the_tie_check_finds_two_way_and_round_ties():
    assert ties({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert ties({"x": {"y"}, "y": {"z"}, "z": {"x"}, "w": {"x"}}) == [["x", "y", "z"]]
    assert ties({"local": {"core"}, "kube": {"local", "core"}}) == []


def test_the_analysis_sees_imports():
    name, imports = layer_imports(PKG / "jobs" / "s3.py")
    assert name == "hanzo_stream.jobs.s3" and imports == {"core"}
    # A lazy import inside a function counts: platform.py imports the jobs' s3 in one.
    assert layer_imports(PKG / "local" / "platform.py")[1] >= {"jobs", "core", "artifacts", "local"}
    # `from .. import x` names the room x; `from ..x.y import z` too.
    assert layer_imports(PKG / "local" / "takeover.py")[1] >= {"pods", "artifacts", "core"}
    assert part_of("hanzo_stream.pods.roller") == "pods" and part_of("hanzo_stream.cli") == "cli"
