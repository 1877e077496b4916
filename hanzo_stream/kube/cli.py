"""`hanzo-stream local kube ...`: a real single-node Kubernetes on this machine."""

from __future__ import annotations

import json
import os
import shlex
import sys
from typing import Annotated

import typer
from rich.markup import escape

from ..cli_common import console as make_console
from ..cli_common import typer_app
from .node import Node, NodeFailed

app = typer_app()
console = make_console(stderr=True)


@app.command()
def up() -> None:
    """Build (first time only) and start the node; safe to re-run."""
    node = Node()
    try:
        node.up(log=lambda s: console.print(escape(s)))
    except (NodeFailed, RuntimeError) as e:
        console.print(f"[bold red]error:[/bold red] {escape(str(e))}")
        raise typer.Exit(1) from None
    console.print('Use it: eval "$(hanzo-stream local kube env)"; kubectl get nodes\n'
                  "Reach pods by their cluster names: hanzo-stream local kube exec -- <command>")


@app.command()
def down(purge: Annotated[bool, typer.Option(help="Also delete the node's data.")] = False) -> None:
    """Stop the node and undo its mounts, cgroups and network namespace."""
    Node().down(purge, log=lambda s: console.print(escape(s)))


@app.command()
def status(json_: Annotated[bool, typer.Option("--json")] = False) -> None:
    """What runs."""
    st = Node().status()
    if json_:
        sys.stdout.write(json.dumps(st, indent=2) + "\n")
        return
    for name, info in st["components"].items():
        mark = "[green]running[/green]" if info["running"] else "[red]stopped[/red]"
        console.print(f"{name:26} {mark}  log {info['log']}")


@app.command()
def env() -> None:
    """Print export lines for kubectl. eval "$(hanzo-stream local kube env)" puts kubectl on
    this node."""
    node = Node()
    sys.stdout.write(f"export KUBECONFIG={shlex.quote(str(node.kubeconfig))}\n"
                     f"export PATH={shlex.quote(str(node.binary('kubectl')).rsplit('/', 1)[0])}:\"$PATH\"\n")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exec(ctx: typer.Context) -> None:
    """Run a command on the node's network. Cluster DNS names resolve there."""
    from . import netns

    node = Node()
    if not ctx.args:
        raise typer.BadParameter("give a command after --")
    argv = [*netns.exec_in(node.addr), *ctx.args]
    os.environ["KUBECONFIG"] = str(node.inner_kubeconfig)
    os.execvp(argv[0], argv)
