"""What every `hanzo-stream` sub-command shares: its consoles, its exit codes and how a bad
registry is reported, so each command looks and fails alike.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

# One meaning per code (docs/cli.md). click's own usage error is 2, which `plan` says for
# "changes pending", so cli.main() gives usage errors 64 (EX_USAGE, as ./dev does).
EXIT = {"ok": 0, "error": 1, "changes": 2, "usage": 64, "interrupted": 130}

UNFOLDED_WIDTH = 1000  # columns when not on a terminal

JsonOpt = Annotated[bool, typer.Option("--json", help="Print the outcome as JSON on stdout.")]


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


def print_json(doc: Any) -> None:
    """A --json report: one JSON document on stdout."""
    sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")


def registry_or_exit(path: Path, err: Console):
    """The registry at `path`, or every problem in it (file, line, field, fix) and exit 1."""
    from .registry import RegistryInvalid, load_registry

    try:
        return load_registry(path)
    except RegistryInvalid as e:
        for p in e.problems:
            err.print(f"[red]error[/red] {escape(str(p))}")
        said = f"{len(e.problems)} problem(s) in {path}; nothing was changed."
        err.print(f"[bold red]{said}[/]")
        if _JSON.on:
            print_json({"ok": False, "exit_code": EXIT["error"], "error": said,
                        "problems": [dataclasses.asdict(p) for p in e.problems]})
        raise typer.Exit(EXIT["error"]) from None


@dataclasses.dataclass
class _JsonMode:
    on: bool = False


_JSON = _JsonMode()


class _Tee(io.TextIOBase):
    """Writes through to `stream`, keeping a copy: what a command said, on stdout or stderr."""

    def __init__(self, stream: Any, copy: io.StringIO):
        self.stream, self.copy = stream, copy

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()


@contextmanager
def errors_as_json(on: bool) -> Iterator[dict[str, Any]]:
    """Under --json a script reads stdout alone: a command that fails without a report of its
    own (nothing on stdout) ends with one there, `{"ok": false, "exit_code", "error", "said"}`,
    from what it said on stderr (which it still says). The caller sets `outcome["code"]`, and
    `outcome["error"]` when it knows the message better than the first line saying "error"."""
    outcome: dict[str, Any] = {"code": 0}
    if not on:
        yield outcome
        return
    said, wrote, real_err, real_out = io.StringIO(), io.StringIO(), sys.stderr, sys.stdout
    _JSON.on, sys.stderr, sys.stdout = True, _Tee(real_err, said), _Tee(real_out, wrote)
    try:
        yield outcome
    finally:
        sys.stderr, sys.stdout = real_err, real_out
        code = outcome["code"]
        if code not in (EXIT["ok"], EXIT["changes"]) and not wrote.getvalue().strip():
            lines = [t for ln in said.getvalue().splitlines() if (t := ln.strip(" │╭╮╰╯─"))]
            first = outcome.get("error") or next(
                (ln for ln in lines if ln.lower().startswith("error")), lines[-1] if lines else "failed")
            print_json({"ok": False, "exit_code": code, "said": lines,
                        "error": re.sub(r"^error(\s*\([^)]*\))?:?\s+", "", first)})
        _JSON.on = False
