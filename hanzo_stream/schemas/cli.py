"""`hanzo-stream schemas check | register`: the BACKWARD gate and the registry sync."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ..cli_common import JsonOpt, console, print_json, registry_or_exit, typer_app

app = typer_app("Event schemas: check, gate, register. Validation, the BACKWARD gate, "
                "schema-registry sync.")
out = console()
err = console(stderr=True)

SchemasDir = Annotated[Path, typer.Option("--schemas", help="The schemas directory.")]
RegistryOpt = Annotated[Path, typer.Option("--registry", "-r", help="Registry file (topics.yaml).")]


def _registry(path: Path):
    return registry_or_exit(path, err)


@app.command()
def check(
    against: Annotated[str, typer.Option(help="Git ref holding the previous versions.")] = "HEAD",
    schemas_dir: SchemasDir = Path("schemas"),
    registry: RegistryOpt = Path("topics.yaml"), json_: JsonOpt = False,
) -> None:
    """Refuse schema changes that are not BACKWARD. schemas/ validated, then compared with REF."""
    from .compat import compare_files
    from .git import GitError, files_at
    from .store import SchemaFileError, from_texts, load
    from .validate import validate_schemas

    problems = validate_schemas(schemas_dir, _registry(registry))
    for p in problems:
        err.print(f"[red]error[/red] {escape(str(p))}")
    try:
        old = from_texts(schemas_dir, files_at(against, schemas_dir))
        new = load(schemas_dir)
    except (GitError, SchemaFileError) as e:
        err.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(1) from None
    violations = compare_files(old.files, new.files)
    for v in violations:
        err.print(f"[red]incompatible[/red] {escape(str(v))}")
    added = sorted(set(new.files) - set(old.files))
    if json_:
        print_json({"ok": not (problems or violations), "against": against,
                    "files": len(new.files), "new": added, "problems": [str(p) for p in problems],
                    "incompatible": [str(v) for v in violations]})
    if problems or violations:
        err.print(f"[bold red]{len(problems)} problem(s), {len(violations)} BACKWARD violation(s) "
                  f"against {against}[/]")
        raise typer.Exit(1)
    if not json_:
        out.print(f"[green]ok[/green] {len(new.files)} schema files valid and BACKWARD compatible "
                  f"with {against}" + (f"; new: {', '.join(added)}" if added else ""))


@app.command()
def register(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show changes; write nothing.")] = False,
    url: Annotated[str | None, typer.Option(
        help="Registry URL (Confluent API).", envvar="HANZO_STREAM_SCHEMA_REGISTRY_URL",
        show_envvar=True)] = None,
    basic_auth: Annotated[str | None, typer.Option(
        help="user:password.", envvar="HANZO_STREAM_SCHEMA_REGISTRY_AUTH", show_envvar=True)] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print the outcome as JSON.")] = False,
    schemas_dir: SchemasDir = Path("schemas"),
    registry: RegistryOpt = Path("topics.yaml"),
) -> None:
    """Register every event type's schema. Subject <topic>-<event type>, BACKWARD."""
    from .register import client, sync
    from .store import load
    from .validate import validate_schemas

    reg = _registry(registry)
    problems = validate_schemas(schemas_dir, reg)
    if problems:
        for p in problems:
            err.print(f"[red]error[/red] {escape(str(p))}")
        raise typer.Exit(1)
    url = url or os.environ.get("HANZO_STREAM_SCHEMA_REGISTRY_URL")
    if not url:
        err.print("[red]error:[/red] no schema registry: pass --url or set "
                  "HANZO_STREAM_SCHEMA_REGISTRY_URL (local: `hanzo-stream local env`)")
        raise typer.Exit(1)
    sr = client(url, basic_auth or os.environ.get("HANZO_STREAM_SCHEMA_REGISTRY_AUTH"))
    try:
        outcomes = sync(sr, load(schemas_dir), reg, dry_run=dry_run)
    except Exception as e:  # network and registry errors: one line, exit 1
        err.print(f"[red]error:[/red] schema registry at {escape(url)}: {escape(str(e))}")
        raise typer.Exit(1) from None
    refused = [o for o in outcomes if o.action == "refused"]
    if json_:
        sys.stdout.write(json.dumps([o.__dict__ for o in outcomes], indent=2) + "\n")
    else:
        for o in outcomes:
            colour = {"unchanged": "dim", "refused": "red"}.get(o.action, "green")
            ver = f" v{o.version}" if o.version else ""
            detail = f": {escape(o.detail)}" if o.detail else ""
            out.print(f"[{colour}]{o.action:>17}[/{colour}] {o.subject}{ver}{detail}")
        changed = sum(o.changed or o.action.startswith("would") for o in outcomes)
        out.print(f"{len(outcomes)} subject(s), {changed} {'to change' if dry_run else 'changed'}, "
                  f"{len(refused)} refused")
    raise typer.Exit(1 if refused else 0)
