"""The one way to reconcile: observe -> plan -> the brokers' validate_only pass -> apply.

The CLI, the local platform, the benchmarks and the test fixtures all call these, so what a
test proves is what `hanzo-stream apply` does, validate_only pass included.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence

from ..registry.model import Registry
from .admin_api import Admin
from .apply import Progress, Result, execute, validate
from .changes import Change, RotateScramPassword
from .observe import observe, observe_moves
from .plan import Options, Plan, make_plan, topics_to_grow, watched_configs


def plan(admin: Admin, registry: Registry, opts: Options = Options()) -> Plan:
    """Read the cluster, diff it against the registry, and let the brokers validate the result.

    For topics whose replication factor grows, the running reassignments are asked of the
    controller and sizes on disk read (the plan shows what each move copies, and resumes a
    move already running). A plan the brokers would reject comes back with errors."""
    state = observe(admin, watched_configs(registry))
    if grow := topics_to_grow(registry, state):
        state = observe_moves(admin, state, grow)
    p = make_plan(registry, state, opts)
    if not p.errors:
        problems, unjudged = validate(admin, p)
        p.errors.extend(problems)
        if unjudged:
            p.notes.append(
                f"not judged by the brokers ({len(unjudged)}): {'; '.join(unjudged)}. This "
                "principal may only read; apply asks the brokers again, as a principal that may, "
                "before anything changes.")
    return p


def reconcile(admin: Admin, registry: Registry, passwords: Mapping[str, str],
              opts: Options | None = None, progress: Callable[[Progress], None] | None = None,
              wait_s: float | None = None, reviewed: Plan | str | None = None,
              where: str = "the saved plan") -> tuple[Plan, Result]:
    """plan, then apply unless refused. With `reviewed` (a saved plan), only what was reviewed
    is applied: see reviewed_plan."""
    opts = opts or Options(available_passwords=frozenset(passwords))
    p = plan(admin, registry, opts)
    if p.errors:
        return p, Result()
    return p, apply(admin, registry, p, passwords, opts, progress, wait_s, reviewed, where)


class StalePlan(ValueError):
    """A saved plan that may not be applied (not a plan, or no longer what applying would
    do): nothing was applied. Its message is what the user reads."""


def reviewed_plan(saved: Plan | str, fresh: Plan, where: str = "the saved plan") -> Plan:
    """The saved plan (a Plan, or the JSON `plan --out` wrote), if applying `fresh` is still
    what a reviewer approved in it; StalePlan if not, or if the text is not a plan.

    The one guard between a review and the cluster: apply() runs it for every caller, and the
    CLI runs it first too, so a refused plan is never shown as the one about to run."""
    if isinstance(saved, str):
        try:
            saved = Plan.from_json(saved)
        except ValueError as e:
            raise StalePlan(f"{where}: {e}") from None
    check_reviewed(saved, fresh, where)
    return saved


def check_reviewed(reviewed: Plan, fresh: Plan, where: str = "the saved plan") -> None:
    """A reviewed plan may be applied only while the cluster is as it was read (fingerprint)
    and the registry still makes the same decisions; the fresh plan is what runs (it knows
    which replica moves already run)."""
    if reviewed.fingerprint != fresh.fingerprint:
        raise StalePlan(f"the cluster changed since this plan was made ({where}); nothing was "
                        "applied. Run plan again.")
    if [c.reviewed() for c in reviewed.changes] != [c.reviewed() for c in fresh.changes]:
        raise StalePlan(f"the registry no longer gives the plan that was reviewed ({where}: "
                        f"{len(reviewed.changes)} change(s), now {len(fresh.changes)}); nothing was "
                        "applied. Run plan again and review it.")


def apply(admin: Admin, registry: Registry, p: Plan, passwords: Mapping[str, str], opts: Options,
          progress: Callable[[Progress], None] | None = None,
          wait_s: float | None = None, reviewed: Plan | str | None = None,
          where: str = "the saved plan") -> Result:
    """Apply a fresh plan (refused with StalePlan, before any call to the cluster, when a
    `reviewed` saved plan no longer matches it: reviewed_plan), then wait until the brokers
    show what was applied, so a plan right after shows no diff."""
    if reviewed is not None:
        reviewed_plan(reviewed, p, where)
    result = execute(admin, p, passwords, progress, wait_s)
    await_visible(admin, registry, result.applied, opts)
    return result


def await_visible(admin: Admin, registry: Registry, applied: Sequence[Change], opts: Options,
                  timeout: float = 15.0) -> bool:
    """Wait until a fresh read no longer plans what was just applied.

    The controller commits a change before every broker has applied it (ACLs and SCRAM users
    show up in DescribeAcls a few hundred ms later), so a plan run right after apply could
    show it again. False if still not visible after `timeout` (the next run will see it)."""
    pending = {_decision(c) for c in applied if not isinstance(c, RotateScramPassword)}
    deadline = time.monotonic() + timeout
    while pending:
        state = observe(admin, watched_configs(registry))
        if grow := topics_to_grow(registry, state):
            state = observe_moves(admin, state, grow)
        pending &= {_decision(c) for c in make_plan(registry, state, opts).changes}
        if pending and time.monotonic() > deadline:
            return False
        if pending:
            time.sleep(0.25)
    return True


def _decision(c: Change) -> str:
    """What a reviewer approved, as a set member (a change holds dicts, so it has no hash):
    comparing lists instead made a wait after 60,000 changes quadratic (minutes)."""
    return json.dumps(c.reviewed().to_dict(), sort_keys=True, default=str)
