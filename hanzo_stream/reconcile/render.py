"""Human-readable plans and results, grouped like `terraform plan`."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from .apply import Result
from .plan import ORDER, Plan

HEADINGS = {"topic": "Topics", "acl": "ACLs", "scram": "SCRAM users"}
STYLE = {"+": "green", "~": "yellow", "-": "red"}


def print_plan(plan: Plan, console: Console) -> None:
    for section in ("topic", "acl", "scram"):
        changes = [c for c in plan.changes if c.kind.startswith(section + ".")]
        if not changes:
            continue
        console.print(f"[bold]{HEADINGS[section]}[/bold]")
        for c in sorted(changes, key=lambda c: (ORDER.index(c.kind), c.target)):
            console.print(f"  [{STYLE[c.symbol]}]{c.symbol} {escape(c.describe())}[/]", highlight=False)
    for note in plan.notes:
        console.print(f"[dim]note: {escape(note)}[/dim]", highlight=False)
    for err in plan.errors:
        console.print(f"[bold red]error:[/bold red] {escape(err)}", highlight=False)
    counts = {s: sum(1 for c in plan.changes if c.symbol == s) for s in "+~-"}
    if plan.errors:
        console.print(f"[bold red]Plan refused: {len(plan.errors)} error(s); nothing will be "
                      "changed.[/bold red]")
    elif plan.changes:
        console.print(f"[bold]Plan:[/bold] {counts['+']} to add, {counts['~']} to change, "
                      f"{counts['-']} to remove.")
    else:
        console.print("[green]No changes. The cluster matches the registry.[/green]")


def print_result(result: Result, console: Console) -> None:
    console.print(f"Applied {len(result.applied)} change(s).")
    for c, msg in result.failed:
        console.print(f"[bold red]failed:[/bold red] {c.symbol} {escape(c.describe())}: {escape(msg)}",
                      highlight=False)
    if result.failed:
        console.print(f"[bold red]{len(result.failed)} change(s) failed; the rest were applied. "
                      "Fix the cause and re-run apply: it plans only what is missing.[/bold red]")
