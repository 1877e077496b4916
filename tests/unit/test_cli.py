"""The command line as a user meets it: one meaning per exit code, no traceback for a user's
mistake, a dead cluster reported in seconds, every environment variable in --help, lines
never folded into a log. Runs the real console entry (python -m hanzo_stream), no cluster."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hanzo_stream.artifacts import versions
from hanzo_stream.cli_common import EXIT
from hanzo_stream.core.connection import ENV

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HANZO_STREAM_")}
    clean |= {"PYTHONPATH": str(ROOT), "COLUMNS": "100"} | (env or {})
    return subprocess.run([sys.executable, "-m", "hanzo_stream", *args], cwd=cwd, env=clean,
                          capture_output=True, text=True, timeout=120)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


def no_traceback(p: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in p.stdout + p.stderr, p.stderr[-3000:]


@pytest.mark.parametrize("args, words", [
    (("plan", "--bogus"), "No such option: --bogus"),
    (("plan", "--max-deletions", "many"), "Invalid value for '--max-deletions'"),
    (("nosuch",), "No such command"),
    (("local", "up", "--brokers"), "requires an argument"),
])
def test_usage_errors_have_an_exit_code_of_their_own(args, words):
    p = run(*args)
    assert p.returncode == EXIT["usage"] != EXIT["changes"], p
    assert words in p.stderr
    no_traceback(p)


def test_the_codes_are_distinct():
    assert len(set(EXIT.values())) == len(EXIT)


def test_version_and_short_help():
    v = run("--version")
    assert v.returncode == 0 and f"Kafka {versions.KAFKA_VERSION}" in v.stdout
    for args in (("-h",), ("plan", "-h"), ("local", "kube", "-h")):
        h = run(*args)
        assert h.returncode == 0 and "Usage:" in h.stdout, args


def test_help_names_every_connection_variable():
    out = run("plan", "-h").stdout
    for var in (*ENV.values(), "HANZO_STREAM_SECRETS_FILE"):
        assert var in out, var


def _commands():
    """(argv, click command) of every command and group, depth first."""
    from typer.main import get_command

    from hanzo_stream.cli import app

    def walk(cmd, argv, ctx):
        yield argv, cmd
        for name in cmd.list_commands(ctx) if hasattr(cmd, "list_commands") else []:
            sub = cmd.get_command(ctx, name)
            yield from walk(sub, [*argv, name], sub.context_class(sub, parent=ctx, info_name=name))

    root = get_command(app)
    return list(walk(root, [], root.context_class(root, info_name="hanzo-stream")))


@pytest.mark.parametrize("columns", [80, 120])
def test_help_wraps_and_never_cuts_a_name_at_80_columns_or_more(columns):
    """rich's option tables cut what did not fit with an ellipsis: at 80 columns every
    environment variable's name in `plan -h`. Every flag and variable of every command is
    shown whole, no line is wider than the terminal, and no summary is cut short (click
    shortens a command's first sentence to what fits beside the others' names). Below 80
    columns click breaks a name longer than its help column in two."""
    from typer.testing import CliRunner

    from hanzo_stream.cli import app

    commands = _commands()
    assert len(commands) >= 30
    for argv, cmd in commands:
        shown = CliRunner().invoke(app, [*argv, "--help"], terminal_width=columns)
        assert shown.exit_code == 0, (argv, shown.output)
        names = [o for p in cmd.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")]
        names += [p.envvar for p in cmd.params if getattr(p, "show_envvar", False) and p.envvar]
        words = set(shown.output.replace("[", " ").replace("]", " ").replace(",", " ").split())
        assert [n for n in names if n not in words] == [], (argv, shown.output)
        lines = shown.output.splitlines()
        assert [ln for ln in lines if len(ln) > columns and " " in ln.strip()] == [], argv
        cut = [ln for ln in lines if ln.rstrip().endswith(("...", "…")) and "Usage:" not in ln]
        assert cut == [], (argv, cut)


def test_every_command_that_reports_has_json():
    with_json = {" ".join(argv) for argv, cmd in _commands()
                 if any("--json" in p.opts for p in cmd.params)}
    assert {"validate", "check", "plan", "apply", "schemas check", "schemas register",
            "jobs list", "jobs show", "local status", "local kube status"} <= with_json


@pytest.mark.parametrize("args, code, words", [
    (("plan", "--json", "--registry", "missing.yaml"), 1, "missing.yaml"),
    (("plan", "--json", "--bogus"), 64, "--bogus"),
    (("jobs", "show", "nosuch", "--json"), 1, "no such job spec"),
    (("plan", "--json", "--security-protocol", "PLAINTEXT", "--bootstrap", "127.0.0.1:{port}"),
     1, "cannot read the cluster"),
])
def test_under_json_an_error_is_one_json_document_on_stdout(args, code, words, tmp_path):
    """A script reads stdout alone: the error is there as JSON (and still said on stderr)."""
    import json

    args = tuple(a.format(port=closed_port()) for a in args)
    p = run(*args, cwd=tmp_path if "missing.yaml" in args else ROOT)
    doc = json.loads(p.stdout)
    assert p.returncode == code and doc["ok"] is False and doc["exit_code"] == code, p
    assert words in doc["error"] + json.dumps(doc.get("problems", [])), doc
    assert not doc["error"].startswith("error"), doc  # the message, not its label
    assert p.stderr.strip(), "said on stderr too"


def test_a_command_that_reported_and_failed_is_not_reported_twice(capsys):
    """plan --json with errors and apply --json with failures write their own document and
    exit 1: that document stays the only one on stdout."""
    import json

    from hanzo_stream.cli_common import errors_as_json

    with errors_as_json(True) as outcome:
        sys.stdout.write(json.dumps({"ok": False, "changes": []}) + "\n")
        outcome["code"] = EXIT["error"]
    assert json.loads(capsys.readouterr().out) == {"ok": False, "changes": []}
    with errors_as_json(True) as outcome:
        sys.stderr.write("error: it broke\n")
        outcome["code"] = EXIT["error"]
    assert json.loads(capsys.readouterr().out)["error"] == "it broke"


def test_json_reports_agree_with_the_registry():
    import json

    from hanzo_stream.jobs.spec import list_specs
    from hanzo_stream.registry import load_registry

    reg = load_registry(ROOT / "topics.yaml")
    v = json.loads(run("validate", "--json").stdout)
    assert v["ok"] and (v["topics"], v["groups"], v["acls"]) == (len(reg.topics), len(reg.groups),
                                                               len(reg.acls()))
    assert json.loads(run("jobs", "list", "--json").stdout) == list_specs(ROOT / "consumers")
    shown = json.loads(run("jobs", "show", "billing-agg", "--json").stdout)
    group = next(g for g in reg.groups if g.name == "billing-agg")
    assert shown["name"] == "billing-agg" and shown["group"]["principal"] == group.principal


@pytest.mark.parametrize("args, words", [
    (("validate", "--registry", "{dir}"), ["{dir}", "a directory", "--registry {dir}/topics.yaml"]),
    (("validate", "--registry", "{missing}"), ["{missing}", "file not found", "--registry"]),
    (("validate", "--registry", "{binary}"), ["{binary}", "not UTF-8", "save the file as UTF-8"]),
    (("dead-letters", "replay", "--from-offset", "0", "--registry", "{dir}"), ["{dir}", "a directory"]),
    (("jobs", "list", "--consumers", "{file}"), ["{file}", "not a directory", "--consumers"]),
    (("jobs", "show", "billing-agg", "--consumers", "{missing}"), ["{missing}", "no such directory"]),
    (("schemas", "check", "--schemas", "{file}"), ["{file}", "no schema files"]),
])
def test_a_bad_path_is_one_error_naming_it_and_the_fix(args, words, tmp_path):
    """Whatever a path points at (a directory, nothing, bytes, a file where a directory goes)."""
    (tmp_path / "binary.yaml").write_bytes(b"\x00\xff\xfe")
    (tmp_path / "file.txt").write_text("x")
    names = {"dir": str(tmp_path), "missing": str(tmp_path / "missing.yaml"),
             "binary": str(tmp_path / "binary.yaml"), "file": str(tmp_path / "file.txt")}
    p = run(*(a.format(**names) for a in args))
    assert p.returncode == EXIT["error"], p
    no_traceback(p)
    assert all(w.format(**names) in p.stderr for w in words), p.stderr


def test_sasl_without_a_username_says_which_variables_to_set():
    p = run("plan", "--bootstrap", f"127.0.0.1:{closed_port()}")
    assert p.returncode == EXIT["error"]
    assert ENV["username"] in p.stderr and ENV["password"] in p.stderr
    no_traceback(p)


def test_a_dead_cluster_fails_in_seconds_with_the_diagnosis_and_no_library_noise():
    t = time.monotonic()
    p = run("plan", env={ENV["bootstrap"]: f"127.0.0.1:{closed_port()}", ENV["username"]: "admin",
                         ENV["password"]: "x"})
    took = time.monotonic() - t
    assert p.returncode == EXIT["error"]
    assert "unreachable" in p.stderr and ENV["bootstrap"] in p.stderr
    assert len(p.stderr.splitlines()) <= 3, p.stderr  # no librdkafka log lines
    assert took < 20, took  # the clients' own retries take half a minute
    no_traceback(p)


@pytest.mark.parametrize("args", [("local", "status"), ("local", "env"), ("local", "down"),
                                  ("validate",), ("plan",), ("schemas", "check")])
def test_outside_the_repository_a_command_names_the_missing_registry(args, tmp_path):
    p = run(*args, cwd=tmp_path)
    assert p.returncode == EXIT["error"], p
    assert "topics.yaml" in p.stderr and "--registry" in p.stderr
    no_traceback(p)


def test_lines_are_not_folded_into_a_log(tmp_path):
    deep = tmp_path.joinpath(*["a-rather-long-directory-name"] * 6)
    deep.mkdir(parents=True)
    p = run("validate", "--registry", str(deep / "topics.yaml"))
    assert p.returncode == EXIT["error"]
    assert any(str(deep / "topics.yaml") in line for line in p.stderr.splitlines()), p.stderr


def test_status_groups_the_same_alert_with_a_count():
    from hanzo_stream.monitoring.status import grouped

    firing = ["DeadLettersArriving"] * 12 + ["ConsumerLagHigh billing-agg", "KafkaDiskSpaceLow"]
    assert grouped(firing) == ["ConsumerLagHigh billing-agg", "DeadLettersArriving x12",
                               "KafkaDiskSpaceLow"]
    assert grouped([]) == []
