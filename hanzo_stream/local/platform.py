"""`hanzo-stream local up/down/status/env`: the platform as processes on this machine.

Components start in dependency order; each is a (start, stop, status) triple so the
whole platform and `--only kafka` share one code path. State lives in state_dir().
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from ..connection import Connection
from ..registry import Registry, load_registry
from . import credentials, kafka
from .paths import state_dir


@dataclass
class Context:
    home: Path
    registry: Registry
    console: Console
    brokers: int = 1

    @property
    def creds(self) -> credentials.Credentials:
        return credentials.load_or_create(self.home / "credentials.json",
                                          sorted(self.registry.principal_names()))

    @property
    def cluster(self) -> kafka.LocalCluster:
        c = kafka.LocalCluster.load(self.home / "kafka")
        if c is None:
            raise RuntimeError("the local broker was never started: run `hanzo-stream local up`")
        return c

    def connection(self, principal: str = "admin", mechanism: str = "SCRAM-SHA-512") -> Connection:
        return self.cluster.connection(principal, self.creds.password(principal), mechanism)


@dataclass(frozen=True)
class Component:
    name: str
    start: Callable[[Context], str]  # returns a one-line summary
    stop: Callable[[Context], None]
    status: Callable[[Context], dict[str, Any]]


def _kafka_start(ctx: Context) -> str:
    c = kafka.start(ctx.home / "kafka", ctx.creds, brokers=ctx.brokers)
    return f"{len(c.nodes)} broker(s) at {c.bootstrap} (SASL_SSL, TLS 1.3); logs: " + ", ".join(
        map(str, c.log_files()))


def _kafka_status(ctx: Context) -> dict[str, Any]:
    c = kafka.LocalCluster.load(ctx.home / "kafka")
    return {"running": kafka.is_running(ctx.home / "kafka"),
            "bootstrap": c.bootstrap if c else None,
            "logs": [str(p) for p in c.log_files()] if c else []}


def _reconcile_start(ctx: Context) -> str:
    from confluent_kafka.admin import AdminClient

    from ..reconcile import CountingAdmin, Options, execute, make_plan, observe

    admin = CountingAdmin(AdminClient(ctx.connection().confluent()))
    passwords = dict(ctx.creds.principals)
    plan = make_plan(ctx.registry, observe(admin), Options(available_passwords=frozenset(passwords)))
    if plan.errors:
        raise RuntimeError("registry plan refused:\n" + "\n".join(plan.errors))
    result = execute(admin, plan, passwords)
    if not result.ok:
        raise RuntimeError("apply failed:\n" + "\n".join(f"{c.describe()}: {m}"
                                                         for c, m in result.failed))
    return f"applied {len(result.applied)} change(s) from {ctx.registry.path}"


def _reconcile_status(ctx: Context) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient

    from ..reconcile import Options, make_plan, observe

    if not kafka.is_running(ctx.home / "kafka"):
        return {"converged": None}
    state = observe(AdminClient(ctx.connection().confluent()))
    plan = make_plan(ctx.registry, state,
                     Options(available_passwords=frozenset(ctx.creds.principals)))
    return {"converged": not plan.changes, "pending_changes": len(plan.changes),
            "topics": len(state.topics)}


def _noop(ctx: Context) -> None:
    return None


COMPONENTS: tuple[Component, ...] = (
    Component("kafka", _kafka_start, lambda ctx: kafka.stop(ctx.home / "kafka") and None,
              _kafka_status),
    Component("reconcile", _reconcile_start, _noop, _reconcile_status),
)


def context(registry_path: Path, console: Console, brokers: int = 1) -> Context:
    return Context(state_dir(), load_registry(registry_path), console, brokers)


def up(ctx: Context, only: set[str] | None = None) -> None:
    unknown = (only or set()) - {c.name for c in COMPONENTS}
    if unknown:
        raise ValueError(f"unknown component(s) {', '.join(sorted(unknown))}; known: "
                         + ", ".join(c.name for c in COMPONENTS))
    for comp in COMPONENTS:
        if only and comp.name not in only:
            continue
        with ctx.console.status(f"starting {comp.name} ..."):
            summary = comp.start(ctx)
        ctx.console.print(f"[green]✓[/green] {comp.name}: {summary}")


def down(ctx: Context, purge: bool = False) -> None:
    for comp in reversed(COMPONENTS):
        comp.stop(ctx)
        ctx.console.print(f"[green]✓[/green] stopped {comp.name}")
    if purge and ctx.home.exists():
        shutil.rmtree(ctx.home)
        ctx.console.print(f"[green]✓[/green] purged {ctx.home}")


def status(ctx: Context) -> dict[str, dict[str, Any]]:
    return {c.name: c.status(ctx) for c in COMPONENTS}
