"""`hanzo-stream jobs ...`: list, show and run the consumer-group jobs.

Mounted by hanzo_stream/cli.py as the `jobs` sub-command; also runnable on its own
(`python -m hanzo_stream.jobs.cli run NAME`), which is what background starts use.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from ..cli_common import JsonOpt, console, print_json, typer_app
from ..core.connection import ConnectionError_
from ..registry import RegistryInvalid, load_registry
from .process import CheckpointBusy, hold_checkpoint, record_exit
from .spec import SpecInvalid, list_specs, load_spec

app = typer_app("The consumer-group jobs (PySpark): list, show, run.")
out = console()
err = console(stderr=True)

RegistryOpt = Annotated[Path, typer.Option("--registry", "-r", help="Registry file.")]
ConsumersOpt = Annotated[Path, typer.Option("--consumers", help="Directory of job specs.")]


def _spec(name: str, registry: Path, consumers: Path):
    try:
        return load_spec(name, load_registry(registry), consumers)
    except (SpecInvalid, RegistryInvalid) as e:
        err.print(f"[red]error[/red] {e}")
        raise typer.Exit(1) from None


@app.command("list")
def list_(consumers: ConsumersOpt = Path("consumers"), json_: JsonOpt = False) -> None:
    """The jobs that have a spec in consumers/."""
    try:
        names = list_specs(consumers)
    except SpecInvalid as e:
        err.print(f"[red]error[/red] {e}")
        raise typer.Exit(1) from None
    if json_:
        print_json(names)
        return
    for name in names:
        out.print(name)


@app.command()
def show(name: str, registry: RegistryOpt = Path("topics.yaml"),
         consumers: ConsumersOpt = Path("consumers"), json_: JsonOpt = False) -> None:
    """A job's spec with the registry's facts filled in."""
    s = _spec(name, registry, consumers)
    if json_:
        print_json(dataclasses.asdict(s))
        return
    out.print(f"[bold]{s.name}[/bold]: {s.description}")
    out.print(f"  principal   {s.principal}")
    out.print(f"  reads       {', '.join(s.topics)}")
    plain = " (a plain consumer-group member, no Spark)" if s.runtime != "spark" else ""
    out.print(f"  runtime     {s.runtime}{plain}")
    out.print(f"  entry point {s.job}")
    out.print(f"  checkpoint  {s.checkpoint}")
    out.print(f"  trigger     every {s.trigger_seconds:g}s (--once: available-now)")
    out.print(f"  lag         SLA {s.lag_sla_seconds:g}s; alert at {s.group.lag.warning:,} / "
              f"{s.group.lag.critical:,} messages (registry)")
    if s.aggregate:
        a = s.aggregate
        out.print(f"  aggregate   {a.output} per {', '.join(a.by)} and {s.window_seconds}s window: "
                  f"sum {', '.join(a.sums)}, exact {a.money}, {a.count}")
    for sink in s.sinks.values():
        opts = ", ".join(f"{k}={v}" for k, v in sink.options.items())
        out.print(f"  sink        {sink.name}: {sink.type}{' (' + opts + ')' if opts else ''}")


@app.command()
def run(
    name: str,
    once: Annotated[bool, typer.Option("--once", help="Process what is there now, then stop.")] = False,
    registry: RegistryOpt = Path("topics.yaml"), consumers: ConsumersOpt = Path("consumers"),
    master: Annotated[str | None, typer.Option(
        help="Spark master (default: local\\[2]).", envvar="HANZO_STREAM_SPARK_MASTER",
        show_envvar=True)] = None,
) -> None:
    """Run a job on local Spark. As its registry principal; Ctrl-C stops it cleanly."""
    from .runner import run as run_job

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    spec = _spec(name, registry, consumers)  # fail fast, with the spec's own messages
    try:  # a plain consumer may run twice (its group shares the partitions); a Spark job may not
        lock = hold_checkpoint(spec.state_dir, name, spec.checkpoint) if spec.runtime == "spark" else None
    except CheckpointBusy as e:  # nothing recorded: the exit file is the other run's
        err.print(f"[red]error:[/red] {e}")
        raise typer.Exit(1) from None
    code = 1  # unless the runner returns: an exception escapes with a traceback
    try:
        code = run_job(name, registry_path=registry, consumers_dir=consumers, once=once,
                       master=master)
    except ConnectionError_ as e:
        err.print(f"[red]error:[/red] {e}")
    finally:  # `local status` tells a failed job from a stopped one by this
        record_exit(spec.state_dir, code)
        if lock:
            lock.close()
    raise typer.Exit(code)


def main(argv: list[str] | None = None) -> None:
    app(args=argv if argv is not None else sys.argv[1:], prog_name="hanzo-stream jobs")


if __name__ == "__main__":
    main()
