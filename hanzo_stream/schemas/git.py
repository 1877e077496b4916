"""Read the previous version of schemas/ from git (`git show REF:path`), for the gate."""

from __future__ import annotations

import subprocess
from pathlib import Path

from .store import EXAMPLES_DIR


class GitError(RuntimeError):
    pass


def _git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise GitError(f"git {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def files_at(ref: str, schemas_dir: Path) -> dict[str, str]:
    """Schema files (relative to schemas_dir, examples excluded) as they were at `ref`."""
    schemas_dir = schemas_dir.resolve()
    probe = schemas_dir if schemas_dir.is_dir() else schemas_dir.parent
    top = Path(_git(probe, "rev-parse", "--show-toplevel").strip())
    try:
        _git(top, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except GitError:
        raise GitError(f"unknown git ref {ref!r}; fetch it first (e.g. git fetch origin main) "
                       "or pass --against with a commit, branch or tag") from None
    prefix = schemas_dir.relative_to(top).as_posix()
    listing = _git(top, "ls-tree", "-r", "--name-only", ref, "--", prefix + "/")
    out: dict[str, str] = {}
    for path in listing.splitlines():
        rel = path[len(prefix) + 1:]
        if not rel.endswith(".json") or rel.split("/", 1)[0] == EXAMPLES_DIR:
            continue
        out[rel] = _git(top, "show", f"{ref}:{path}")
    return out
