"""What every `hanzo-stream` sub-command shares: its consoles, its exit codes and how a bad
registry is reported, so each command looks and fails alike.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

# One meaning per code (docs/cli.md). click's own usage error is 2, which `plan` says for
# "changes pending", so cli.main() gives usage errors 64 (EX_USAGE, as ./dev does).
EXIT = {"ok": 0, "error": 1, "changes": 2, "usage": 64, "interrupted": 130}

UNFOLDED_WIDTH = 1000  # columns when not on a terminal


def typer_app(help: str | None = None) -> typer.Typer:
    """A command group as every one of ours is made. Its help is click's plain text, which
    wraps at any width: rich's option tables cut what did not fit with an ellipsis, and at 80
    columns that was every environment variable's name."""
    return typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                       rich_markup_mode=None, help=help,
                       context_settings={"help_option_names": ["-h", "--help"]})


def console(stderr: bool = False) -> Console:
    """On a terminal rich fits lines to its width; into a log or a pipe a line is never folded
    (rich would assume 80 columns and break a path in two)."""
    stream = sys.stderr if stderr else sys.stdout
    tty = hasattr(stream, "isatty") and stream.isatty()
    return Console(stderr=stderr, highlight=False, soft_wrap=True,
                   width=None if tty else UNFOLDED_WIDTH)


def registry_or_exit(path: Path, err: Console):
    """The registry at `path`, or every problem in it (file, line, field, fix) and exit 1."""
    from .registry import RegistryInvalid, load_registry

    try:
        return load_registry(path)
    except RegistryInvalid as e:
        for p in e.problems:
            err.print(f"[red]error[/red] {escape(str(p))}")
        err.print(f"[bold red]{len(e.problems)} problem(s) in {path}; nothing was changed.[/]")
        raise typer.Exit(EXIT["error"]) from None
