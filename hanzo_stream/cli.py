"""The `hanzo-stream` command line. Sub-command groups live next to what they drive."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Hanzo Stream: topics.yaml registry, reconciler, schemas, jobs, local platform.")
