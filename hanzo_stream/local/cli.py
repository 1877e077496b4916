"""`hanzo-stream local ...` commands."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from . import platform

app = typer.Typer(no_args_is_help=True)
console = Console(stderr=True, highlight=False)
RegistryOpt = Annotated[Path, typer.Option("--registry", "-r")]


@app.command()
def up(
    only: Annotated[str | None, typer.Option(help="Comma-separated components, e.g. kafka.")] = None,
    brokers: Annotated[int, typer.Option(help="1, or 3 for replication (RF 3, min ISR 2).")] = 1,
    registry: RegistryOpt = Path("topics.yaml"),
) -> None:
    """Start the platform (or --only some of it); safe to re-run."""
    if brokers not in (1, 3):
        raise typer.BadParameter("use 1 or 3 brokers", param_hint="--brokers")
    ctx = platform.context(registry, console, brokers)
    try:
        platform.up(ctx, {s.strip() for s in only.split(",")} if only else None)
    except Exception as e:
        console.print(f"[bold red]error:[/bold red] {escape(str(e))}")
        raise typer.Exit(1) from None
    console.print(f'Point commands at it: eval "$(hanzo-stream local env)"  (state: {ctx.home})')


@app.command()
def down(purge: Annotated[bool, typer.Option(help="Also delete data, logs and credentials.")] = False,
         registry: RegistryOpt = Path("topics.yaml")) -> None:
    """Stop everything; data is kept unless --purge."""
    platform.down(platform.context(registry, console), purge)


@app.command()
def env(principal: Annotated[str, typer.Option(help="Connect as this principal.")] = "admin",
        mechanism: Annotated[str, typer.Option(help="SCRAM-SHA-512 or PLAIN.")] = "SCRAM-SHA-512",
        registry: RegistryOpt = Path("topics.yaml")) -> None:
    """Print export lines: eval "$(hanzo-stream local env --principal llm-gateway)"."""
    ctx = platform.context(registry, console)
    try:
        conn = ctx.connection(principal, mechanism)
    except (KeyError, RuntimeError) as e:
        console.print(f"[red]error:[/red] {escape(str(e.args[0]))}")
        raise typer.Exit(1) from None
    sys.stdout.write(conn.env_exports())


@app.command()
def status(json_: Annotated[bool, typer.Option("--json")] = False,
           registry: RegistryOpt = Path("topics.yaml")) -> None:
    """Show what runs and how it is doing."""
    st = platform.status(platform.context(registry, console))
    if json_:
        sys.stdout.write(json.dumps(st, indent=2) + "\n")
        return
    for name, info in st.items():
        console.print(f"[bold]{name}[/bold]: " + escape(", ".join(f"{k}={v}" for k, v in info.items())))
