"""The `hanzo-stream` command line. Sub-command groups live next to what they drive.

Exit codes, for CI (EXIT below; README.md): 0 success / no changes, 1 error, 2 changes
pending (plan), 64 usage error (an unknown flag, a bad value), 130 interrupted.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

try:  # typer >= 0.26 carries its own click
    from typer._click.exceptions import ClickException, UsageError
except ImportError:  # pragma: no cover
    from click.exceptions import ClickException, UsageError

from .cli_common import EXIT, JsonOpt, console, errors_as_json, print_json, registry_or_exit, typer_app
from .core.connection import ENV, Connection, ConnectionError_
from .reconcile.replication import DEFAULT_THROTTLE
from .reconcile.secrets import SECRETS_FILE_ENV

app = typer_app("Hanzo Stream: topics.yaml registry, reconciler, schemas, jobs, local platform.")
out = console()
err = console(stderr=True)

RegistryOpt = Annotated[Path, typer.Option("--registry", "-r", help="Registry file.")]
# The connection flags, each with the environment variable it overrides (connection.ENV).
Bootstrap = Annotated[str | None, typer.Option(
    help="Brokers, host:port[,host:port].", envvar=ENV["bootstrap"], show_envvar=True)]
Protocol = Annotated[str | None, typer.Option(
    help="SASL_SSL (default), SASL_PLAINTEXT, SSL or PLAINTEXT.", envvar=ENV["security_protocol"],
    show_envvar=True)]
Mechanism = Annotated[str | None, typer.Option(
    help="SCRAM-SHA-512 (default) or PLAIN.", envvar=ENV["sasl_mechanism"], show_envvar=True)]
Username = Annotated[str | None, typer.Option(
    help="The principal.", envvar=ENV["username"], show_envvar=True)]
Password = Annotated[str | None, typer.Option(
    help="Its password (prefer the variable: a flag shows in the process list).",
    envvar=ENV["password"], show_envvar=True)]
CaFile = Annotated[str | None, typer.Option(
    help="CA bundle (PEM) the brokers' certificates chain to.", envvar=ENV["ca_file"],
    show_envvar=True)]
SecretsFile = Annotated[Path | None, typer.Option(
    help="JSON {principal: password} for SCRAM users; HANZO_STREAM_PASSWORD_<NAME> wins.",
    envvar=SECRETS_FILE_ENV, show_envvar=True)]
AllowDelete = Annotated[bool, typer.Option(
    help="Delete topics and ACLs the registry does not list (never internal topics).")]
MaxDeletions = Annotated[int, typer.Option(help="Refuse the plan if it deletes more topics.")]
Rotate = Annotated[bool, typer.Option(help="Reset every declared SCRAM user's password.")]
ScramUsers = Annotated[bool, typer.Option(
    "--scram-users/--no-scram-users",
    help="Create SCRAM users (and rotate them with --rotate-passwords). --no-scram-users leaves "
         "them to the in-cluster reconciler Job, the one writer of passwords on Kubernetes.")]
Throttle = Annotated[int, typer.Option(
    help="Replication throttle while replicas copy, bytes/s per broker, leader and follower side.")]


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    from .artifacts import versions

    try:
        mine = installed("hanzo-stream")
    except PackageNotFoundError:  # run from a checkout without installing it
        mine = "unknown"
    return (f"hanzo-stream {mine} (Kafka {versions.KAFKA_VERSION}, "
            f"Spark {versions.SPARK_VERSION}, Python {sys.version.split()[0]})")


def _print_version(value: bool) -> None:
    if value:
        out.print(version())
        raise typer.Exit(EXIT["ok"])


@app.callback()
def _options(_: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print the version (and the Kafka and Spark it drives) and exit.")] = False) -> None:
    pass


def main() -> None:
    """The console script: `app`, with usage errors on an exit code of their own (EXIT)."""
    from typer import rich_utils

    args = sys.argv[1:]
    with errors_as_json("--json" in args[: args.index("--") if "--" in args else None]) as outcome:
        try:
            code = app(prog_name="hanzo-stream", standalone_mode=False)
        except UsageError as e:  # an unknown flag or command, a bad or missing value, no command
            rich_utils.rich_format_error(e)  # (no command: the help, already printed)
            code, outcome["error"] = EXIT["usage"], e.format_message()
        except ClickException as e:
            rich_utils.rich_format_error(e)
            code, outcome["error"] = e.exit_code, e.format_message()
        except typer.Abort:
            err.print("interrupted")
            code = EXIT["interrupted"]
        outcome["code"] = code = code if isinstance(code, int) else EXIT["ok"]
    sys.exit(code)


def _registry(path: Path):
    return registry_or_exit(path, err)


def _connection(bootstrap, protocol, mechanism, username, password, ca_file) -> Connection:
    try:
        conn = Connection.from_env(bootstrap=bootstrap, security_protocol=protocol,
                                   sasl_mechanism=mechanism, username=username,
                                   password=password, ca_file=ca_file)
    except ConnectionError_ as e:
        err.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(EXIT["error"]) from None
    missing = conn.login_missing()
    if missing:
        err.print(f"[red]error:[/red] {escape(missing)}")
        raise typer.Exit(EXIT["error"])
    return conn


def _admin(conn: Connection):
    """An admin client, once `check`'s diagnosis finds nothing wrong: a cluster that cannot
    be reached or logged into fails in seconds with the cause, not after the clients' retries
    (and their log lines, which go nowhere: the diagnosis says what they would)."""
    import logging

    from .core.diagnose import diagnose
    from .reconcile import CountingAdmin

    problem = diagnose(conn)
    if problem:
        err.print(f"[red]error:[/red] cannot read the cluster at {conn.bootstrap} "
                  f"({problem.kind}): {escape(problem.message)}")
        raise typer.Exit(EXIT["error"])
    quiet = logging.getLogger("hanzo_stream.librdkafka")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    return CountingAdmin.connect(conn, logger=quiet)


@app.command()
def validate(registry: RegistryOpt = Path("topics.yaml"), json_: JsonOpt = False) -> None:
    """Check topics.yaml and schemas/ against the standard. No cluster needed."""
    reg = _registry(registry)
    extra = _optional("hanzo_stream.schemas.validate", "validate_all")
    problems = extra(reg) if extra else []
    for p in problems:
        err.print(f"[red]error[/red] {escape(str(p))}")
    counts = {"topics": len(reg.topics), "groups": len(reg.groups),
              "principals": len(reg.principals), "acls": len(reg.acls())}
    if json_:
        print_json({"ok": not problems, "registry": str(registry), **counts,
                    "problems": [str(p) for p in problems]})
    if problems:
        raise typer.Exit(1)
    if not json_:
        out.print(f"[green]ok[/green] {registry}: {counts['topics']} topics, {counts['groups']} "
                  f"groups, {counts['principals']} principals, {counts['acls']} ACLs")


@app.command()
def check(
    bootstrap: Bootstrap = None, security_protocol: Protocol = None,
    sasl_mechanism: Mechanism = None, sasl_username: Username = None,
    sasl_password: Password = None, ca_file: CaFile = None, json_: JsonOpt = False,
) -> None:
    """Connect and log in, or say exactly why not. TLS, SASL, credentials: each its own
    error. Exit 0/1."""
    from .core.diagnose import diagnose

    conn = _connection(bootstrap, security_protocol, sasl_mechanism, sasl_username,
                       sasl_password, ca_file)
    problem = diagnose(conn)
    if json_:
        print_json({"ok": problem is None, "bootstrap": conn.bootstrap,
                    "security_protocol": conn.security_protocol,
                    "username": conn.username if conn.uses_sasl else None,
                    **({"kind": problem.kind, "error": problem.message} if problem else {})})
    if problem:
        err.print(f"[red]error ({problem.kind}):[/red] {escape(problem.message)}")
        raise typer.Exit(1)
    who = f", logged in as {conn.username} ({conn.sasl_mechanism})" if conn.uses_sasl else ""
    if not json_:
        out.print(f"[green]ok[/green] {conn.bootstrap}: {conn.security_protocol}{who}")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                               "help_option_names": []})
def kafka(ctx: typer.Context, tool: Annotated[str | None, typer.Argument(
        help="consumer-groups, topics, get-offsets, configs and the others of "
             "kafka_tools.py")] = None) -> None:
    """Run a Kafka tool, logged in as this shell. The login is HANZO_STREAM_*: everything after
    TOOL is the tool's, and --bootstrap-server and --command-config are added. Exit: the tool's."""
    from .artifacts import kafka_tools

    if tool in ("-h", "--help"):  # this command's own help; `kafka TOOL --help` is the tool's
        typer.echo(ctx.get_help())
        raise typer.Exit(EXIT["ok"])
    try:
        kafka_tools.main_class(tool or "")
    except kafka_tools.UnknownTool as e:
        err.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(EXIT["usage"]) from None
    if {"-h", "--help"} & set(ctx.args):  # the tool's own help, no login needed
        raise typer.Exit(kafka_tools.run(tool or "", ctx.args, None))
    conn = _connection(None, None, None, None, None, None)
    raise typer.Exit(kafka_tools.run(tool or "", ctx.args, conn))


@app.command("client-properties")
def client_properties(
    out_file: Annotated[Path, typer.Argument(help="The file to write (0600, replaced whole).")],
    bootstrap: Bootstrap = None, security_protocol: Protocol = None,
    sasl_mechanism: Mechanism = None, sasl_username: Username = None,
    sasl_password: Password = None, ca_file: CaFile = None,
) -> None:
    """Write this login as Java client properties. For a tool's --command-config (Kafka's own
    tools need none: `hanzo-stream kafka`)."""
    from .artifacts.kafka_tools import client_properties as properties
    from .core.secret_files import write_secret

    conn = _connection(bootstrap, security_protocol, sasl_mechanism, sasl_username,
                       sasl_password, ca_file)
    write_secret(out_file, properties(conn))
    out.print(f"[green]ok[/green] {escape(str(out_file))}: the login of {conn.username} "
              f"at {conn.bootstrap}")


def _plan(reg, conn, allow_delete, max_deletions, rotate, secrets_file, throttle, scram_users):
    from .reconcile import Options, plan
    from .reconcile.secrets import load_passwords

    if rotate and not scram_users:
        err.print("[red]error:[/red] --rotate-passwords sets SCRAM passwords and --no-scram-users "
                  "leaves them to the reconciler Job: drop one")
        raise typer.Exit(EXIT["usage"])
    admin = _admin(conn)
    passwords = load_passwords(reg.principal_names(), secrets_file) if scram_users else {}
    opts = Options(allow_delete, max_deletions, rotate, frozenset(passwords),
                   throttle or DEFAULT_THROTTLE, scram_users=scram_users)
    try:
        p = plan(admin, reg, opts)
    except Exception as e:
        from .core.diagnose import diagnose

        admin.close()
        why = diagnose(conn) or e  # the specific cause (TLS, SASL, credentials), not a timeout
        err.print(f"[red]error:[/red] cannot read the cluster at {conn.bootstrap}: {escape(str(why))}")
        raise typer.Exit(1) from None
    return admin, p, passwords, opts


@app.command()
def plan(
    registry: RegistryOpt = Path("topics.yaml"),
    json_: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    out_file: Annotated[Path | None, typer.Option("--out", help="Save the plan for apply.")] = None,
    allow_delete: AllowDelete = False, max_deletions: MaxDeletions = 0,
    rotate_passwords: Rotate = False, secrets_file: SecretsFile = None,
    scram_users: ScramUsers = True, throttle: Throttle = DEFAULT_THROTTLE,
    bootstrap: Bootstrap = None, security_protocol: Protocol = None,
    sasl_mechanism: Mechanism = None, sasl_username: Username = None,
    sasl_password: Password = None, ca_file: CaFile = None,
) -> None:
    """Show what apply would change. Exit 0 no changes, 2 changes pending, 1 error, 64 usage."""
    from .reconcile.render import print_plan

    reg = _registry(registry)
    conn = _connection(bootstrap, security_protocol, sasl_mechanism, sasl_username,
                       sasl_password, ca_file)
    admin, p, _, _ = _plan(reg, conn, allow_delete, max_deletions, rotate_passwords, secrets_file,
                           throttle, scram_users)
    admin.close()
    if out_file:
        out_file.write_text(p.to_json())
    if json_:
        sys.stdout.write(p.to_json() + "\n")
    else:
        print_plan(p, out)
        if out_file:
            out.print(f"Saved to {out_file}; `hanzo-stream apply --plan {out_file}` applies it "
                      "only if the cluster has not changed since.")
    raise typer.Exit(p.exit_code)


@app.command()
def apply(
    registry: RegistryOpt = Path("topics.yaml"),
    plan_file: Annotated[Path | None, typer.Option("--plan", help="A plan saved by plan --out.")] = None,
    allow_delete: AllowDelete = False, max_deletions: MaxDeletions = 0,
    rotate_passwords: Rotate = False, secrets_file: SecretsFile = None,
    scram_users: ScramUsers = True, throttle: Throttle = DEFAULT_THROTTLE,
    wait: Annotated[float | None, typer.Option(
        help="Seconds to follow a replica move before exiting 1 with it still running "
             "(re-run apply to resume); default: 3x the estimate, 5 min at least.")] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    bootstrap: Bootstrap = None, security_protocol: Protocol = None,
    sasl_mechanism: Mechanism = None, sasl_username: Username = None,
    sasl_password: Password = None, ca_file: CaFile = None,
) -> None:
    """Make the cluster match the registry. Exit 0 done, 1 error (nothing or part applied),
    130 interrupted (a replica move goes on in the brokers; apply again resumes it)."""
    reg = _registry(registry)
    conn = _connection(bootstrap, security_protocol, sasl_mechanism, sasl_username,
                       sasl_password, ca_file)
    admin, fresh, passwords, opts = _plan(reg, conn, allow_delete, max_deletions, rotate_passwords,
                                          secrets_file, throttle, scram_users)
    with admin:
        _apply(admin, reg, fresh, plan_file, passwords, opts, wait, json_)


def _apply(admin, reg, fresh, plan_file, passwords, opts, wait, json_) -> None:
    """apply, once the cluster is read: a saved plan refused (reconcile.run's guard) is said
    before the plan is shown as the one to run, then the changes."""
    from .reconcile.render import print_plan, print_result, progress_display
    from .reconcile.run import StalePlan, reviewed_plan
    from .reconcile.run import apply as apply_plan

    todo, saved = fresh, None
    if plan_file:
        try:
            saved = reviewed_plan(plan_file.read_text(), fresh, str(plan_file))
        except StalePlan as e:
            err.print(f"[bold red]error:[/bold red] {escape(str(e))}")
            raise typer.Exit(1) from None
    if not json_:
        print_plan(todo, out)
    if todo.errors:
        raise typer.Exit(1)
    try:
        with progress_display(err if json_ else out) as progress:
            result = apply_plan(admin, reg, todo, passwords, opts, progress=progress, wait_s=wait,
                                reviewed=saved, where=str(plan_file))
    except KeyboardInterrupt:
        err.print("[bold yellow]interrupted:[/bold yellow] any replica move goes on in the "
                  "brokers, still throttled; run apply again to follow it, finish it and remove "
                  "the throttle.")
        raise typer.Exit(130) from None
    if json_:
        sys.stdout.write(json.dumps({
            "applied": len(result.applied), "admin_calls": dict(admin.calls),
            "failed": [{"kind": c.KIND, "change": c.describe(), "error": m}
                       for c, m in result.failed]}) + "\n")
    else:
        print_result(result, out)
    raise typer.Exit(0 if result.ok else 1)


dead_letters_app = typer_app("Dead letters: replay them, checked.")


@dead_letters_app.command("replay")
def replay_dead_letters(
    from_offset: Annotated[int, typer.Option(help="First dead_letter offset.")],
    to_offset: Annotated[int | None, typer.Option(help="End offset, exclusive (default: the end).")] = None,
    source_topic: Annotated[str | None, typer.Option(help="Only letters from this topic.")] = None,
    error_class: Annotated[str | None, typer.Option(help="Only letters of this error class.")] = None,
    execute: Annotated[bool, typer.Option(help="Write; without it, say what would be written.")] = False,
    include_protected: Annotated[bool, typer.Option(
        help="Also producer-stage letters to protected topics (billing_events, audit_log), "
             "once their producer's team has recognised them.")] = False,
    registry: RegistryOpt = Path("topics.yaml"), secrets_file: SecretsFile = None,
    bootstrap: Bootstrap = None, security_protocol: Protocol = None,
    sasl_mechanism: Mechanism = None, sasl_username: Username = None,
    sasl_password: Password = None, ca_file: CaFile = None,
) -> None:
    """Put dead letters back on their topics, checked. Each needs (hanzo_stream/client/replay.py)
    a registry topic, a plausible stage, bytes that pass the topic's contract now; written as a
    producer of that topic, never as the admin. Exit 0: all replayed; 1: some refused or failed."""
    import dataclasses

    from .client import replay
    from .client.router import Router
    from .reconcile.secrets import load_passwords
    from .schemas.store import load_schemas
    from .schemas.validator import Validator

    reg = _registry(registry)
    conn = _connection(bootstrap, security_protocol, sasl_mechanism, sasl_username,
                       sasl_password, ca_file)
    _admin(conn)  # the diagnosis: a cluster that cannot be reached fails here, in seconds
    router = Router(reg, Validator(load_schemas(Path(reg.path).resolve().parent / "schemas")))
    producers = {p for t in reg.topics for p in t.producers if p != "*"}
    passwords = load_passwords(producers, secrets_file)
    letters = [x for x in replay.read_letters(conn, from_offset, to_offset)
               if (source_topic is None or x.source == source_topic)
               and (error_class is None or x.error_class == error_class)]
    read, close = replay.source_reader(conn)
    try:
        verdicts = replay.judge_all(letters, reg, router, read, passwords, include_protected)
    finally:
        close()
    for v in verdicts:
        at = f"dead_letter@{v.letter.offset}"
        if v.copy_of is not None:
            out.print(f"[dim]skip[/dim] {at}: a copy of dead_letter@{v.copy_of} (the same failure "
                      "or event written twice; replayed once)")
        elif v.refused:
            out.print(f"[red]refused[/red] {at} ({escape(v.letter.source)}): {escape(v.refused)}")
        else:
            out.print(f"{'replay' if execute else 'would replay'} {at} -> {v.letter.source} "
                      f"as {v.writer} ({escape(v.letter.error_class)})")
    ok = [v for v in verdicts if v.accepted]
    errors: list[str] = []
    if execute and ok:
        conns = {w: dataclasses.replace(conn, username=w, password=passwords[w],
                                        sasl_mechanism="SCRAM-SHA-512")
                 for w in {v.writer for v in ok if v.writer}}
        errors = replay.write(ok, conns)
        for e in errors:
            err.print(f"[red]error:[/red] {escape(e)}")
    refused = sum(1 for v in verdicts if v.refused)
    copies = sum(1 for v in verdicts if v.copy_of is not None)
    out.print(f"{'replayed' if execute else 'would replay'} {len(ok)}, refused {refused}, "
              f"copies skipped {copies} "
              f"(dead_letter [{from_offset}, {to_offset if to_offset is not None else 'end'}))")
    raise typer.Exit(EXIT["error"] if refused or errors else EXIT["ok"])


def _optional(module: str, attr: str):
    """A part that may not exist in every checkout yet; its own import errors still raise."""
    if importlib.util.find_spec(module.rsplit(".", 1)[0]) is None or \
            importlib.util.find_spec(module) is None:
        return None
    return getattr(importlib.import_module(module), attr, None)


from .kube.cli import app as kube_app  # noqa: E402
from .local.cli import app as local_app  # noqa: E402

# `local kube` is mounted here, not by local/cli.py: kube/ imports local/, never the reverse.
local_app.add_typer(kube_app, name="kube", help="A real single-node Kubernetes on this machine.")
app.add_typer(local_app, name="local", help="The whole platform as local processes.")
app.add_typer(dead_letters_app, name="dead-letters")
for _name, _module in (("schemas", "hanzo_stream.schemas.cli"), ("jobs", "hanzo_stream.jobs.cli")):
    _sub = _optional(_module, "app")
    if _sub is not None:
        app.add_typer(_sub, name=_name)
