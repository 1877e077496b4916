"""`hanzo-stream local ...` commands."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from ..cli_common import EXIT, registry_or_exit, typer_app
from ..cli_common import console as make_console
from ..monitoring.status import grouped as grouped_alerts
from ..reconcile.secrets import SECRETS_FILE_ENV
from . import platform

app = typer_app()  # hanzo_stream/cli.py mounts `local kube` on it: kube/ builds on local/
console = make_console(stderr=True)
RegistryOpt = Annotated[Path, typer.Option("--registry", "-r", help="Registry file.")]


def _context(registry: Path, brokers: int | None = None) -> platform.Context:
    return platform.context(registry_or_exit(registry, console), console, brokers)


@app.command()
def up(
    only: Annotated[str | None, typer.Option(help="Comma-separated components, e.g. kafka.")] = None,
    brokers: Annotated[int | None, typer.Option(
        help="A new cluster's size: 1, or 3 for replication (RF 3, min ISR 2). Default: 1, or "
             "the size the cluster already has.")] = None,
    wait: Annotated[float, typer.Option(
        help="Seconds to watch the pipeline until every part has delivered (0: don't watch).")] = 600,
    registry: RegistryOpt = Path("topics.yaml"),
) -> None:
    """Start the platform and watch events flow. Or --only some of it; safe to re-run."""
    if brokers not in (None, 1, 3):
        raise typer.BadParameter("use 1 or 3 brokers", param_hint="--brokers")
    ctx = _context(registry, brokers)
    try:
        failed = platform.up(ctx, {s.strip() for s in only.split(",")} if only else None)
    except Exception as e:
        console.print(f"[bold red]error:[/bold red] {escape(str(e))}")
        raise typer.Exit(1) from None
    if failed:
        console.print(f"[bold red]failed:[/bold red] {', '.join(failed)} exited right after starting; "
                      f"fix the cause in the log above, then `hanzo-stream local up --only "
                      f"{','.join(failed)}`")
        raise typer.Exit(1)
    if not only and wait > 0:
        missing = _watch(ctx, wait)
        if missing:
            console.print(f"[bold red]not working after {wait:.0f}s:[/bold red] {', '.join(missing)}; "
                          f"logs: `hanzo-stream local status` lists them")
            raise typer.Exit(1)
        console.print("[green]✓[/green] events reach ClickHouse, billing_events (and PostgreSQL), "
                      "agent_rpc_settlements, "
                      "llm-metrics and the audit archive; "
                      "lag is visible per group. The platform keeps running: "
                      "`hanzo-stream local status`, `hanzo-stream local down`.")
    console.print(f'Point commands at it: eval "$(hanzo-stream local env)"  (state: {ctx.home})')


def _watch(ctx: platform.Context, seconds: float) -> list[str]:
    """Live status until the pipeline has shown every part working, or `seconds` pass."""
    deadline = time.monotonic() + seconds
    missing = ["nothing read yet"]
    before = _safe_pipeline(ctx)
    with Live(console=console, refresh_per_second=1, transient=False) as live:
        while time.monotonic() < deadline:
            comps = platform.status(ctx, processes_only=True)
            pipe = _safe_pipeline(ctx)
            missing = platform.working(ctx, pipe, before) + [
                f"{n} {info.get('state', 'stopped')} (log {info.get('log')})" for n, info in comps.items()
                if info.get("running") is False]
            live.update(Group(_pipeline_table(pipe),
                              f"waiting for: {', '.join(missing)}" if missing else "all flowing\n"))
            if not missing:
                break
            time.sleep(3)
    return missing


def _safe_pipeline(ctx: platform.Context) -> dict[str, Any]:
    try:
        return platform.pipeline(ctx)
    except Exception as e:  # Prometheus starting, a job restarting: keep watching
        return {"error": str(e)}


def _pipeline_table(p: dict[str, Any]) -> Table:
    t = Table(title="pipeline", show_header=True, header_style="bold")
    t.add_column("what")
    t.add_column("now", justify="right")
    for group, lag in sorted((p.get("lag") or {}).items()):
        t.add_row(f"lag {group}", f"{lag:,}")
    for topic, rate in sorted((p.get("messages_in_per_sec") or {}).items()):
        if topic.startswith("__"):
            continue
        t.add_row(f"events/s {topic}", f"{rate:,.1f}")
    for label, key in (("rows in ClickHouse (events)", "clickhouse_rows"),
                       ("billing windows (billing_events)", "billing_events"),
                       ("RPC settlements (agent_rpc_settlements)", "settlements"),
                       ("billing rows (PostgreSQL)", "billing_rows"),
                       ("LLM requests counted (llm-metrics)", "llm_requests"),
                       ("audit archive objects (S3)", "audit_objects"), ("dead letters", "dead_letters"),
                       ("pages sent (local PagerDuty)", "pages"),
                       ("under-replicated partitions", "under_replicated")):
        v = p.get(key)
        t.add_row(label, "-" if v is None else f"{v:,}")
    if p.get("firing"):
        t.add_row("alerts firing", escape(", ".join(grouped_alerts(p["firing"]))))
    if p.get("error"):
        t.add_row("error", escape(p["error"]))
    return t


@app.command()
def scale(brokers: Annotated[int, typer.Option(help="The new number of brokers (3 or more).")],
          registry: RegistryOpt = Path("topics.yaml")) -> None:
    """Add brokers to the running cluster, live. Each joins the controller quorum too."""
    if brokers < 3:
        raise typer.BadParameter("a cluster grows to 3 brokers or more", param_hint="--brokers")
    ctx = _context(registry)
    try:
        with console.status(f"growing the cluster to {brokers} brokers ..."):
            summary = platform.scale(ctx, brokers)
    except Exception as e:
        console.print(f"[bold red]error:[/bold red] {escape(str(e))}")
        raise typer.Exit(1) from None
    console.print(f"[green]✓[/green] kafka: {escape(summary)}")


Parts = Annotated[list[str], typer.Argument(
    help="Components, as `local status` names them (kafka, prometheus, billing-agg, ...).")]


def _parts(registry: Path, parts: list[str], act) -> None:
    ctx = _context(registry)
    try:
        act(ctx, set(parts))
    except ValueError as e:  # an unknown part: nothing was stopped or started
        console.print(f"[bold red]error:[/bold red] {escape(str(e))}")
        raise typer.Exit(EXIT["usage"]) from None


@app.command()
def stop(parts: Parts, registry: RegistryOpt = Path("topics.yaml")) -> None:
    """Stop these parts only (the rest keeps running; data is kept)."""
    _parts(registry, parts, lambda ctx, only: platform.stop(ctx, only, quiet=False))


def _start(ctx: platform.Context, only: set[str]) -> None:
    if platform.up(ctx, only):  # one died right after starting: up printed why
        raise typer.Exit(1)


@app.command()
def start(parts: Parts, registry: RegistryOpt = Path("topics.yaml")) -> None:
    """Start these parts (as `up --only`, without watching the pipeline)."""
    _parts(registry, parts, _start)


@app.command()
def restart(parts: Parts, registry: RegistryOpt = Path("topics.yaml")) -> None:
    """Stop these parts, then start them again."""
    _parts(registry, parts, lambda ctx, only: (platform.stop(ctx, only, quiet=False), _start(ctx, only)))


@app.command()
def down(purge: Annotated[bool, typer.Option(help="Also delete data, logs and credentials.")] = False,
         registry: RegistryOpt = Path("topics.yaml")) -> None:
    """Stop everything; data is kept unless --purge."""
    platform.down(_context(registry), purge)


@app.command()
def env(principal: Annotated[str, typer.Option(help="Connect as this principal.")] = "admin",
        mechanism: Annotated[str, typer.Option(help="SCRAM-SHA-512 or PLAIN.")] = "SCRAM-SHA-512",
        registry: RegistryOpt = Path("topics.yaml")) -> None:
    """Print export lines for this shell. eval "$(hanzo-stream local env --principal llm-gateway)".

    As admin it also names the 0600 credentials file (HANZO_STREAM_SECRETS_FILE), so a plain
    `hanzo-stream apply` finds every principal's password without one being printed.
    """
    ctx = _context(registry)
    try:
        conn = ctx.connection(principal, mechanism)
    except (KeyError, RuntimeError) as e:
        console.print(f"[red]error:[/red] {escape(str(e.args[0]))}")
        raise typer.Exit(1) from None
    secrets = (f"export {SECRETS_FILE_ENV}={shlex.quote(str(ctx.credentials_file))}\n"
               if principal == "admin" else f"unset {SECRETS_FILE_ENV}\n")
    sys.stdout.write(conn.env_exports() + secrets + platform.service_exports(ctx))


@app.command()
def sql(
    query: Annotated[str, typer.Argument(
        help="One read-only statement: SELECT, WITH, SHOW, DESCRIBE, EXISTS or EXPLAIN.")],
    format_: Annotated[str | None, typer.Option(
        "--format", "-f", help="A ClickHouse output format (CSV, JSONEachRow, Vertical, ...); "
                               "default PrettyCompact on a terminal, else TabSeparated. A FORMAT "
                               "clause in the query wins.")] = None,
    json_: Annotated[bool, typer.Option(
        "--json", help="The answer in ClickHouse's JSON format (meta, data, rows) on stdout.")] = False,
    job: Annotated[str, typer.Option(help="The job whose embedded ClickHouse to ask.")] = platform.SQL_JOB,
) -> None:
    """Read-only SQL on ClickHouse (events) while the job writes it.

    The job's driver owns the embedded chDB and answers on 127.0.0.1 (`local status` shows its
    sql_url): ClickHouse's HTTP interface, so curl and clickhouse-connect can ask it too."""
    from ..core.paths import state_dir
    from ..jobs import chdb_http

    url = platform.sql_url(state_dir(), job)
    if url is None:
        console.print(f"[bold red]error:[/bold red] {job} is not running, and its driver is what "
                      f"answers SQL: start it with `hanzo-stream local start {job}` "
                      "(or `hanzo-stream local up`)")
        raise typer.Exit(1)
    fmt = "JSON" if json_ else format_ or ("PrettyCompact" if sys.stdout.isatty() else "TabSeparated")
    try:
        out = chdb_http.ask(url, query, fmt)
    except chdb_http.QueryError as e:
        console.print(f"[bold red]error:[/bold red] {escape(str(e))}")
        raise typer.Exit(1) from None
    except OSError as e:  # it stopped between the record and the query
        console.print(f"[bold red]error:[/bold red] {job} did not answer at {url} ({escape(str(e))}); "
                      "`hanzo-stream local status` shows how it is")
        raise typer.Exit(1) from None
    binary = getattr(sys.stdout, "buffer", None)  # Native, Parquet, ... as they came
    if binary is None:  # --json: stdout is text, kept for the error report
        sys.stdout.write(out.decode(errors="replace"))
    else:
        sys.stdout.flush()
        binary.write(out)
        binary.flush()


@app.command()
def status(json_: Annotated[bool, typer.Option("--json")] = False,
           registry: RegistryOpt = Path("topics.yaml")) -> None:
    """Show what runs and how the pipeline is doing."""
    ctx = _context(registry)
    st: dict[str, Any] = {"components": platform.status(ctx), "pipeline": _safe_pipeline(ctx)}
    if json_:
        sys.stdout.write(json.dumps(st, indent=2) + "\n")
        return
    for name, info in st["components"].items():
        console.print(component_line(name, info))
    console.print(_pipeline_table(st["pipeline"]))


def component_line(name: str, info: dict[str, Any]) -> str:
    """One status line; a job that died on its own is red, with its exit code and why."""
    if info.get("state") == "failed":
        code = info.get("exit_code")
        why = f"exit code {code}" if code is not None else "no exit code (killed?)"
        log, last = escape(str(info.get("log"))), escape(str(info.get("last_log_line") or "-"))
        return f"[bold]{name}[/bold]: [bold red]failed[/bold red] ({why}), log={log}\n  last: {last}"
    return f"[bold]{name}[/bold]: " + escape(", ".join(f"{k}={v}" for k, v in info.items()))
