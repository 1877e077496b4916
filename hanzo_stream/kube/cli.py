"""`hanzo-stream local kube ...`: a real single-node Kubernetes on this machine."""

from __future__ import annotations

import json
import os
import shlex
import sys
from typing import Annotated

import typer
import yaml
from rich.markup import escape

from ..cli_common import EXIT, typer_app
from ..cli_common import console as make_console
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


Env = Annotated[str, typer.Argument(help="dev or prod: the committed stack (Pulumi.<env>.yaml) "
                                         "with what this node needs (kube/deploy.py LOCAL)")]
StackName = Annotated[str | None, typer.Option("--stack", help="The local stack's name "
                                                "(default: local-<env>).")]
Sets = Annotated[list[str] | None, typer.Option(
    "--set", help="KEY=VALUE, a stack setting on top (docs/deploy.md#settings); the value is "
                  "read as YAML: --set spark=false, --set brokers=3.")]


def _settings(sets: list[str] | None) -> dict:
    out = {}
    for item in sets or []:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise typer.BadParameter(f"{item!r}: give KEY=VALUE, e.g. --set spark=false",
                                     param_hint="--set")
        out[key] = yaml.safe_load(value)
    return out


def _stack(env: str, stack: str | None) -> str:
    if env not in ("dev", "prod"):
        raise typer.BadParameter(f"{env!r}: dev or prod (the committed Pulumi.<env>.yaml)",
                                 param_hint="ENV")
    return stack or f"local-{env}"


def _pulumi(what: str, run) -> object:
    """Pulumi's own progress on stderr as it goes; a failure is one line, exit 1."""
    from pulumi.automation import errors

    try:
        return run(lambda line: console.print(escape(line.rstrip("\n")), soft_wrap=True))
    except (errors.CommandError, NodeFailed, RuntimeError) as e:
        last = [ln for ln in str(e).splitlines() if ln.strip()][-12:]
        console.print(f"[bold red]error:[/bold red] {what} failed:\n" + escape("\n".join(last)))
        raise typer.Exit(1) from None


@app.command()
def deploy(env: Env, stack: StackName = None, sets: Sets = None) -> None:
    """`pulumi up` of a stack to this node. The node must be up; the images are built first."""
    from .deploy import Deployer

    name, settings = _stack(env, stack), _settings(sets)
    result, _ = _pulumi(f"pulumi up {name}",
                           lambda out: Deployer().up(name, env, settings, on_output=out))
    console.print(f"[green]ok[/green] {name}: {dict(result.summary.resource_changes or {})}")
    sys.stdout.write(json.dumps({k: v.value for k, v in result.outputs.items() if not v.secret},
                                indent=2, default=str) + "\n")


@app.command()
def preview(env: Env, stack: StackName = None, sets: Sets = None) -> None:
    """`pulumi preview` of a stack on this node: what deploy would change. Exit 0 none, 2 some."""
    from .deploy import Deployer

    name, settings = _stack(env, stack), _settings(sets)
    plan = _pulumi(f"pulumi preview {name}",
                   lambda out: Deployer().preview(name, env, settings, on_output=out))
    console.print(f"{name}: {plan.changes} change(s) {dict(plan.summary)}")
    raise typer.Exit(EXIT["changes"] if plan.changes else EXIT["ok"])


@app.command()
def destroy(env: Env, stack: StackName = None) -> None:
    """`pulumi destroy` of a local stack. Its volumes' claims stay with the namespace."""
    from .deploy import Deployer

    name = _stack(env, stack)
    _pulumi(f"pulumi destroy {name}", lambda out: Deployer().destroy(name, env, on_output=out))
    console.print(f"[green]ok[/green] {name} destroyed")
