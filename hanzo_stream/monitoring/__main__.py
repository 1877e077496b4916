"""`python -m hanzo_stream.monitoring generate [--check] [--registry topics.yaml]`.

Writes the files derived from the registry and from dashboards.py; with --check it
writes nothing and exits 1 if any committed file differs (what CI and the tests run).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..registry import load_registry
from . import MONITORING_DIR, alerts, dashboards, llm_alerts


def generated(registry_path: Path) -> dict[Path, str]:
    """Every generated file and its expected content."""
    registry = load_registry(registry_path)
    out = {alerts.GENERATED_FILE: alerts.render(registry),
           alerts.GENERATED_TEST_FILE: alerts.render_tests(registry),
           alerts.BATCH_TEST_FILE: alerts.render_batch_tests(registry)}
    for d in dashboards.DASHBOARDS:
        out[d.file] = dashboards.render(d)
    llm = llm_alerts.settings(args_root(registry_path))
    out[llm_alerts.GENERATED_FILE] = llm_alerts.render(llm)
    out[llm_alerts.GENERATED_TEST_FILE] = llm_alerts.render_tests(llm)
    return out


def args_root(registry_path: Path) -> Path:
    """The checkout of a registry file: consumers/ sits beside topics.yaml."""
    return Path(registry_path).resolve().parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hanzo_stream.monitoring")
    ap.add_argument("command", choices=["generate"])
    ap.add_argument("--check", action="store_true", help="fail if a committed file is stale")
    ap.add_argument("--registry", type=Path, default=MONITORING_DIR.parent / "topics.yaml")
    args = ap.parse_args(argv)
    stale = []
    for path, text in generated(args.registry).items():
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    for path in stale:
        print(f"{'stale' if args.check else 'wrote'}: {path.relative_to(MONITORING_DIR.parent)}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
