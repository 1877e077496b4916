"""A pull request's settings, taken as data into the base branch's checkout for `pulumi preview`.

    python -m infra.proposed PR_CHECKOUT [--into .]

.github/workflows/infra.yml previews on `pull_request_target`: the workflow, the program and
this module are the base branch's, and the pull request's files are read, never run. What a
pull request may change there is what only the program reads: each stack's `hanzo-stream:*`
settings (not its secrets provider, ESC environments or the Kubernetes provider's keys: those
would point the preview's credentials elsewhere), topics.yaml, consumers/ and monitoring/, as
YAML and JSON. A link is refused wherever it is: one pointing at the runner's files would have
the base code put them into a rendered ConfigMap, or an error message, in the preview's log.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import yaml

from .settings import PROJECT

DATA_FILES = ("topics.yaml",)
DATA_DIRS = ("consumers", "monitoring")
DATA_SUFFIXES = (".yaml", ".yml", ".json")


class Refused(ValueError):
    """What the pull request holds that a preview with credentials must not read."""


def _no_links(path: Path) -> None:
    for p in [path, *(path.rglob("*") if path.is_dir() and not path.is_symlink() else [])]:
        if p.is_symlink():
            raise Refused(f"{p}: a link; commit the file itself (a preview reads no link)")


def _stack_config(path: Path) -> dict:
    doc = yaml.safe_load(path.read_text()) or {}
    if not isinstance(doc, dict) or not isinstance(doc.get("config") or {}, dict):
        raise Refused(f"{path}: not a stack file (a mapping with a `config:` mapping)")
    config = doc.get("config") or {}
    foreign = sorted(k for k in config if not str(k).startswith(f"{PROJECT}:"))
    if foreign:
        raise Refused(f"{path}: config {', '.join(foreign)}: a preview takes only the "
                      f"{PROJECT}:* settings from a pull request; change the others on main")
    return config


def take(pr: Path, into: Path) -> list[str]:
    """Write the pull request's settings over the base checkout's; returns what it wrote.
    Every check runs before the first write, so a refusal leaves the checkout as it was."""
    _no_links(pr)
    stacks = {p.name: _stack_config(p) for p in sorted(pr.glob("Pulumi.*.yaml"))}
    for name in stacks:
        if not (into / name).is_file():
            raise Refused(f"{pr / name}: no such stack on main; add a new stack there first")
    for d in DATA_DIRS:
        for p in sorted((pr / d).rglob("*")):
            if p.is_file() and p.suffix not in DATA_SUFFIXES:
                raise Refused(f"{p}: only {', '.join(DATA_SUFFIXES)} files are taken from "
                              f"{d}/ (a preview runs no pull request's code)")
    wrote = []
    for name, config in stacks.items():
        base = yaml.safe_load((into / name).read_text()) or {}
        (into / name).write_text(yaml.safe_dump({**base, "config": config}, sort_keys=False))
        wrote.append(name)
    for f in DATA_FILES:
        if (pr / f).is_file():
            shutil.copyfile(pr / f, into / f)
            wrote.append(f)
    for d in DATA_DIRS:
        if (pr / d).is_dir():
            shutil.rmtree(into / d, ignore_errors=True)
            shutil.copytree(pr / d, into / d)
            wrote.append(f"{d}/")
    return wrote


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m infra.proposed", description=__doc__.split("\n")[0])
    ap.add_argument("pr", type=Path, help="the pull request's sparse checkout")
    ap.add_argument("--into", type=Path, default=Path("."), help="the base branch's checkout")
    a = ap.parse_args(argv)
    try:
        wrote = take(a.pr, a.into)
    except Refused as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print("took from the pull request: " + ", ".join(wrote))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
