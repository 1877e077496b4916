"""Human-readable plans, results and progress, grouped like `terraform plan`."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as Bar
from rich.table import Table

from .apply import Progress, Result
from .changes import ORDER, Change, RaiseReplication
from .plan import Plan
from .replication import estimate_seconds, human_bytes

HEADINGS = {"topic": "Topics", "replication": "Replication", "acl": "ACLs", "scram": "SCRAM users",
            "quota": "Client quotas"}
STYLE = {"+": "green", "~": "yellow", "-": "red"}
MOVES_SHOWN = 24  # per topic; the JSON plan has them all


def section(c: Change) -> str:
    return "replication" if c.KIND in ("topic.replication", "replication.throttle") else c.KIND.split(".")[0]


def print_plan(plan: Plan, console: Console) -> None:
    for name, heading in HEADINGS.items():
        changes = [c for c in plan.changes if section(c) == name]
        if not changes:
            continue
        console.print(f"[bold]{heading}[/bold]")
        for c in sorted(changes, key=lambda c: (ORDER.index(c.KIND), c.target)):
            console.print(f"  [{STYLE[c.SYMBOL]}]{c.SYMBOL} {escape(c.describe())}[/]", highlight=False)
            if isinstance(c, RaiseReplication):
                console.print(_moves_table(c), highlight=False)
    for note in plan.notes:
        console.print(f"[dim]note: {escape(note)}[/dim]", highlight=False)
    for err in plan.errors:
        console.print(f"[bold red]error:[/bold red] {escape(err)}", highlight=False)
    counts = Counter(c.SYMBOL for c in plan.changes)
    if plan.errors:
        console.print(f"[bold red]Plan refused: {len(plan.errors)} error(s); nothing will be "
                      "changed.[/bold red]")
    elif plan.changes:
        console.print(f"[bold]Plan:[/bold] {counts['+']} to add, {counts['~']} to change, "
                      f"{counts['-']} to remove.")
        if moves := plan.of(RaiseReplication):
            every = [m for c in moves for m in c.moves]
            console.print(f"Replicas to copy: {human_bytes(sum(c.bytes for c in moves))} over "
                          f"{len(every)} partition(s), about "
                          f"{_duration(estimate_seconds(every, moves[0].throttle))} at the throttle.")
    else:
        console.print("[green]No changes. The cluster matches the registry.[/green]")


def _moves_table(c: RaiseReplication) -> Table:
    table = Table(box=None, padding=(0, 2), pad_edge=False, show_edge=False)
    for col in ("    partition", "replicas (leader first)", "new", "to copy", ""):
        table.add_column(col, justify="right" if col in ("to copy",) else "left")
    for m in c.moves[:MOVES_SHOWN]:
        table.add_row(f"    {m.partition}", str(m.replicas), ",".join(map(str, m.new_replicas)),
                      human_bytes(m.bytes), "running" if m.running else "")
    if len(c.moves) > MOVES_SHOWN:
        table.add_row("    ...", f"{len(c.moves) - MOVES_SHOWN} more (plan --json lists all)", "", "", "")
    return table


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min"


def print_result(result: Result, console: Console) -> None:
    console.print(f"Applied {len(result.applied)} change(s).")
    for c, msg in result.failed:
        console.print(f"[bold red]failed:[/bold red] {c.SYMBOL} {escape(c.describe())}: {escape(msg)}",
                      highlight=False)
    if result.failed:
        console.print(f"[bold red]{len(result.failed)} change(s) failed; the rest were applied. "
                      "Fix the cause and re-run apply: it plans only what is missing.[/bold red]")


@contextmanager
def progress_display(console: Console, every_s: float = 10.0) -> Iterator[Callable[[Progress], None]]:
    """A callback for execute(): a live bar on a terminal, a line every `every_s` in a CI log."""
    if console.is_terminal:
        bar = Bar(TextColumn("replicas in sync {task.fields[parts]}"), BarColumn(), DownloadColumn(),
                  TimeElapsedColumn(), console=console, transient=False)
        task = bar.add_task("copy", total=None, parts="")
        with bar:
            yield lambda p: bar.update(task, total=max(p.bytes, 1), completed=p.bytes_done,
                                       parts=f"{p.partitions_done}/{p.partitions}")
        return
    last = [0.0]

    def line(p: Progress) -> None:
        if time.monotonic() - last[0] >= every_s or p.partitions_done == p.partitions:
            last[0] = time.monotonic()
            console.print(f"replicas in sync: {p.partitions_done}/{p.partitions} partitions, "
                          f"{human_bytes(p.bytes_done)} of {human_bytes(p.bytes)} copied, "
                          f"{p.elapsed_s:.0f} s", highlight=False)

    yield line
