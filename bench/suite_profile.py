"""The suite's profile: per module, its wall time, the CPU of what it started, how long it
waited and what it proves; the production code's line coverage beside it. Writes one section
of docs/testing.md.

    python bench/suite_profile.py --run [--coverage] --section "After (stop 54)"
    python bench/suite_profile.py --section NAME      # from the last run's profile files

--run runs the suite as `./dev test` does (tests/lanes.sh); each lane leaves its profile in
.hanzo-stream/suite-profile/ (tests/suite_profile.py) and, with --coverage, the coverage in
.hanzo-stream/coverage/.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import write_section  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / ".hanzo-stream" / "suite-profile"
COVERAGE = ROOT / ".hanzo-stream" / "coverage" / "coverage.json"
DOC = ROOT / "docs" / "testing.md"
HEADER = "# Testing\n"
PROVES_WIDTH = 240
LANES = ("integration", "side", "local", "kube", "unit")  # tests/lanes.sh (`local`, `kube`: a trial)


def proves(module: str) -> str:
    """The first sentence of a test module's docstring: what it proves."""
    doc = ast.get_docstring(ast.parse((ROOT / module).read_text())) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    cut = first.find(". ")
    first = first[:cut + 1] if cut > 0 else first
    if len(first) > PROVES_WIDTH:  # a table cell: the module's docstring has the rest
        first = first[:PROVES_WIDTH].rsplit(" ", 1)[0] + " …"
    return first or "(no docstring)"


def waited(wall: float, cpu: float, cores: int) -> float:
    """The wall time the module's CPU would not fill even on all cores: time spent waiting."""
    return max(0.0, wall - cpu / cores)


def cpu_of(lane: dict, m: dict) -> float:
    """The module's CPU; profiles before lane cgroups had the machine's un-niced busy time for
    the integration lane and rusage for the unit lane (tests/suite_profile.py at 3b5039b)."""
    if "cpu" in m:
        return m["cpu"]
    return m["own_cpu"] if lane["lane"] == "unit" else m["machine_cpu"]


def table(lane: dict) -> tuple[str, float, float]:
    cores = lane["cores"]
    rows, total_cpu = [], 0.0
    mods = sorted(lane["modules"].items(), key=lambda kv: -kv[1]["wall"])
    for name, m in mods:
        cpu = cpu_of(lane, m)
        total_cpu += cpu
        slowest = max(m["tests"].items(), key=lambda kv: kv[1], default=("", 0.0))
        test = slowest[0].split("::", 1)[-1] if slowest[0] else ""
        outcomes = ", ".join(f"{n} {k}" for k, n in sorted(m["outcomes"].items()))
        rows.append(f"| `{Path(name).name}` | {m['wall']:,.0f} | {cpu:,.0f} | "
                    f"{waited(m['wall'], cpu, cores):,.0f} | {outcomes} | "
                    f"`{test}` {slowest[1]:,.0f} s | {proves(name)} |")
    head = ("| module | wall s | CPU s | waits s | tests | slowest test | what it proves |\n"
            "|---|---:|---:|---:|---|---|---|\n")
    return head + "\n".join(rows), lane["wall"], total_cpu


def busy(lane: dict) -> str:
    """How full the machine was while the lane ran: everything on it, both lanes and any Go
    build beside them. Near 100%, the run is CPU-bound, and only less CPU makes it shorter;
    running more side by side does not."""
    if "machine_cpu" not in lane:  # profiles before stop 56
        return ""
    share = lane["machine_cpu"] / (lane["wall"] * lane["cores"])
    return (f" The whole machine was busy {lane['machine_cpu']:,.0f} CPU-s of the "
            f"{lane['wall'] * lane['cores']:,.0f} its {lane['cores']} cores had in that time "
            f"({share:.0%}).")


def coverage() -> str:
    if not COVERAGE.exists():
        return "Coverage: not measured in this run (`--coverage`)."
    totals = json.loads(COVERAGE.read_text())["totals"]
    return (f"Production line coverage (hanzo_stream/, infra/, spark/; every Python process "
            f"the suite started, coverage.py): **{totals['percent_covered']:.2f}%**, "
            f"{totals['covered_lines']:,} of {totals['num_statements']:,} lines.")


def render(commit: str, whole: float | None) -> str:
    parts = [f"Commit `{commit}`." + (f" `tests/lanes.sh` took **{whole:,.0f} s** in all." if whole
                                      else ""), coverage()]
    for name in LANES:
        path = PROFILE / f"{name}.json"
        if not path.exists():
            continue
        lane = json.loads(path.read_text())
        body, wall, cpu = table(lane)
        what = ("CPU: the lane's cgroup, everything it started (brokers, Spark, the node's pods)"
                if lane.get("cgroup") else
                "CPU: the pytest process's own and its reaped children's (it runs at nice 10)"
                if name == "unit" else
                "CPU: the machine's un-niced busy time while the module ran (brokers, Spark, pods)")
        parts.append(f"### The {name} lane: {wall:,.0f} s wall, {cpu:,.0f} s CPU\n\n{what}; "
                     f"waits: wall minus CPU over the cores.{busy(lane)}\n\n{body}")
    for f in sorted(PROFILE.glob("parts-*.json")):  # tests/suite_profile.py record_parts
        cpu = json.loads(f.read_text())
        listed = ", ".join(f"{name} {s:,.0f}" for name, s in cpu.items())
        parts.append(f"CPU-s of {f.stem.removeprefix('parts-')}'s long-running parts, as its "
                     f"module ended: {listed}.")
    return "\n\n".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", action="store_true", help="run the suite (tests/lanes.sh) first")
    ap.add_argument("--coverage", action="store_true", help="with --run: measure line coverage")
    ap.add_argument("--section", required=True, help="the section of docs/testing.md to write")
    args = ap.parse_args()
    whole, code = None, 0
    if args.run:
        env = dict(os.environ)
        env.pop("HANZO_STREAM_LOCAL_JIT", None)  # report.py's benchmark JIT: the suite runs as CI does
        env["HANZO_STREAM_COVERAGE"] = "1" if args.coverage else ""
        if not args.coverage:
            COVERAGE.unlink(missing_ok=True)
        t = time.monotonic()
        code = subprocess.call(["bash", str(ROOT / "tests" / "lanes.sh")], cwd=ROOT, env=env)
        whole = time.monotonic() - t
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                            capture_output=True).stdout.strip()
    body = render(commit, whole)
    print(body)
    write_section(args.section, body, doc=DOC, header=HEADER)
    return code


if __name__ == "__main__":
    sys.exit(main())
