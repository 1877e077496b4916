"""Carry out a plan: one handler per change class, each one batched admin call (or a few).

A failed item never stops the others: every result is collected, the caller exits 1 if
any failed, and the next run plans exactly what is still missing. `validate` runs the same
handlers in their validate-only mode (Env.validate_only): each sends its own requests with
validate_only, so the brokers judge a plan before anything changes.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from ..registry.model import Acl
from . import replication
from .admin_api import Admin, KafkaAdmin
from .changes import (
    CHANGE_TYPES,
    AddPartitions,
    AlterTopicConfigs,
    Change,
    ClearThrottle,
    CreateAcl,
    CreateScramUser,
    CreateTopic,
    DeleteAcl,
    DeleteTopic,
    RaiseReplication,
    RotateScramPassword,
    SetUserQuotas,
)
from .observe import client_resource_type
from .plan import MIN_ISR, Plan

TIMEOUT = 60.0
SCRAM_ITERATIONS = 8192
POLL_S = 1.0
#: The KRaft controller refuses a request that writes more than 10,000 metadata records
#: ("Unable to perform excessively large batch operation"): 10,000 topics in one CreateTopics
#: failed whole (bench/reconcile.py). A topic is about 1 + partitions + configs records, an
#: ACL one; creates go in chunks well under the limit.
MAX_RECORDS_PER_REQUEST = 5_000
#: 2,003 SCRAM upserts in one request timed out after 60 s (each is a salted hash of 8,192
#: iterations); a few hundred a request answer in seconds.
SCRAM_PER_REQUEST = 250


@dataclass
class Result:
    """What the handlers did; validate-only, `applied` holds what the brokers accepted."""

    applied: list[Change] = field(default_factory=list)
    failed: list[tuple[Change, str]] = field(default_factory=list)
    unowned: list[tuple[str, str]] = field(default_factory=list)  # (what, error) of no one change

    @property
    def ok(self) -> bool:
        return not self.failed


@dataclass(frozen=True)
class Progress:
    """How far the replica copy is: what `apply` shows while it waits."""

    partitions_done: int
    partitions: int
    bytes_done: int
    bytes: int
    elapsed_s: float


@dataclass(frozen=True)
class Env:
    passwords: Mapping[str, str] = field(default_factory=dict)
    progress: Callable[[Progress], None] | None = None
    wait_s: float | None = None  # None: three times the estimate at the throttle, 5 min at least
    validate_only: bool = False  # the brokers judge each request; nothing changes


# ---------------------------------------------------------------- request builders

def _new_topic(c: CreateTopic) -> NewTopic:
    return NewTopic(c.topic, c.partitions.after, c.replication_factor.after or -1,
                    config={k: v.after for k, v in c.configs.items()})


def _new_partitions(c: AddPartitions) -> NewPartitions:
    if c.replicas:
        return NewPartitions(c.topic, c.partitions.after, replica_assignment=[list(r) for r in c.replicas])
    return NewPartitions(c.topic, c.partitions.after)


def _config(rtype: ResourceType, name: str, configs: Mapping[str, str | None]) -> ConfigResource:
    """SET each value, DELETE each None (back to the broker's default)."""
    return ConfigResource(rtype, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) if v is not None else
        ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
        for k, v in configs.items()])


def _acl_binding(a: Acl, cls: type = AclBinding) -> Any:
    return cls(client_resource_type(a.resource_type), a.resource_name, ResourcePatternType[a.pattern_type],
               a.principal, a.host, AclOperation[a.operation], AclPermissionType[a.permission])


def _collect(result: Result, changes: Iterable[Change], futures: Mapping[Any, Any],
             key: Callable[[Any], Any]) -> None:
    for c in changes:
        try:
            futures[key(c)].result()
            result.applied.append(c)
        except Exception as e:  # each item fails alone; reported, never raised
            result.failed.append((c, _message(e)))


class Denied(str):
    """An error message saying the principal may not: for validate, "not judged", not "wrong"."""


_DENIED = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED}


def _message(e: Exception) -> str:
    err = e.args[0] if e.args else e
    text = err.str() if hasattr(err, "str") else str(err)
    return Denied(text) if isinstance(err, KafkaError) and err.code() in _DENIED else text


def _alter_configs(admin: KafkaAdmin,
                   per_resource: Mapping[tuple[ResourceType, str], Mapping[str, str | None]],
                   validate_only: bool = False) -> dict[tuple[ResourceType, str], str | None]:
    """One IncrementalAlterConfigs for all topics, one per broker (a broker's own configs can
    only be sent to it, and librdkafka takes one broker resource per call); per resource None
    or the error."""
    resources = [_config(rt, n, cfg) for (rt, n), cfg in per_resource.items()]
    batches = [[r for r in resources if r.restype != ResourceType.BROKER]]
    batches += [[r] for r in resources if r.restype == ResourceType.BROKER]
    out: dict[tuple[ResourceType, str], str | None] = {}
    for batch in filter(None, batches):
        futures = admin.incremental_alter_configs(batch, validate_only=validate_only,
                                                  request_timeout=TIMEOUT)
        for res, fut in futures.items():
            try:
                fut.result()
                out[(res.restype, res.name)] = None
            except Exception as e:  # per resource, reported
                out[(res.restype, res.name)] = _message(e)
    return out


Configs = dict[tuple[ResourceType, str], dict[str, str | None]]  # (type, name) -> key -> value


def _topic_configs(changes: Iterable[RaiseReplication]) -> Configs:
    """What a move sets on its topic: the throttled replicas (and min ISR, when it must drop)."""
    out: Configs = {}
    for c in changes:
        cfg: dict[str, str | None] = dict(replication.throttle_configs(c.moves))
        if c.min_insync_during is not None:
            cfg[MIN_ISR] = str(c.min_insync_during)
        out[(ResourceType.TOPIC, c.topic)] = cfg
    return out


def _broker_rates(brokers: Iterable[int], rate: int | None) -> Configs:
    value = None if rate is None else str(rate)
    return {(ResourceType.BROKER, str(b)): dict.fromkeys(replication.BROKER_RATES, value)
            for b in sorted(set(brokers))}


# ---------------------------------------------------------------- handlers, one per change class

Handler = Callable[[Admin, list[Any], Result, Env], None]


def chunks(items: list[Any], records: Callable[[Any], int],
           limit: int = MAX_RECORDS_PER_REQUEST) -> Iterable[list[Any]]:
    """`items` in order, in lists whose metadata records stay within `limit` (one item over
    it goes alone)."""
    chunk: list[Any] = []
    total = 0
    for item in items:
        n = records(item)
        if chunk and total + n > limit:
            yield chunk
            chunk, total = [], 0
        chunk.append(item)
        total += n
    if chunk:
        yield chunk


def _topic_records(c: CreateTopic) -> int:
    return 1 + c.partitions.after + len(c.configs)


def _create_topics(admin: Admin, changes: list[CreateTopic], result: Result, env: Env) -> None:
    for chunk in chunks(changes, _topic_records):
        futures = admin.create_topics([_new_topic(c) for c in chunk], validate_only=env.validate_only,
                                      request_timeout=TIMEOUT)
        _collect(result, chunk, futures, lambda c: c.topic)


def _add_partitions(admin: Admin, changes: list[AddPartitions], result: Result, env: Env) -> None:
    futures = admin.create_partitions([_new_partitions(c) for c in changes],
                                      validate_only=env.validate_only, request_timeout=TIMEOUT)
    _collect(result, changes, futures, lambda c: c.topic)


def _alter_topic_configs(admin: Admin, changes: list[AlterTopicConfigs], result: Result, env: Env) -> None:
    answers = _alter_configs(admin, {(ResourceType.TOPIC, c.topic): {k: v.after for k, v in c.configs.items()}
                                     for c in changes}, env.validate_only)
    _record(result, changes, lambda c: answers[(ResourceType.TOPIC, c.topic)])


def _record(result: Result, changes: Iterable[Change], error: Callable[[Any], str | None]) -> None:
    for c in changes:
        msg = error(c)
        (result.failed.append((c, msg)) if msg else result.applied.append(c))


def _create_acls(admin: Admin, changes: list[CreateAcl], result: Result, env: Env) -> None:
    if env.validate_only:  # CreateAcls has no validate_only
        return
    for chunk in chunks(changes, lambda c: 1):
        bindings = {id(c): _acl_binding(c.acl) for c in chunk}
        futures = admin.create_acls(list(bindings.values()), request_timeout=TIMEOUT)
        _collect(result, chunk, futures, lambda c, b=bindings: b[id(c)])


def _delete_acls(admin: Admin, changes: list[DeleteAcl], result: Result, env: Env) -> None:
    if env.validate_only:  # nor has DeleteAcls
        return
    filters = {id(c): _acl_binding(c.acl, AclBindingFilter) for c in changes}
    futures = admin.delete_acls(list(filters.values()), request_timeout=TIMEOUT)
    _collect(result, changes, futures, lambda c: filters[id(c)])


def _upsert_scram(admin: Admin, changes: list[CreateScramUser | RotateScramPassword], result: Result,
                  env: Env) -> None:
    if env.validate_only:  # nor has AlterUserScramCredentials
        return
    ready = [c for c in changes if c.user in env.passwords]
    for c in changes:
        if c.user not in env.passwords:
            var = "HANZO_STREAM_PASSWORD_" + c.user.upper().replace("-", "_")
            result.failed.append((c, f"no password for {c.user}: set {var} or pass --secrets-file"))
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
    for chunk in chunks(ready, lambda c: 1, limit=SCRAM_PER_REQUEST):
        futures = admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(c.user, info, env.passwords[c.user].encode()) for c in chunk],
            request_timeout=TIMEOUT)
        _collect(result, chunk, futures, lambda c: c.user)


def _alter_quotas(admin: Admin, changes: list[SetUserQuotas],
                  validate_only: bool = False) -> dict[str, str | None]:
    """user -> None or the error: a SetUserQuotas holds a dict, so it cannot be a key."""
    import kafka.errors

    try:
        answers = admin.alter_user_quotas({c.user: {k: v.after for k, v in c.quotas.items()}
                                           for c in changes}, validate_only=validate_only)
    except kafka.errors.KafkaError as e:
        return {c.user: f"{type(e).__name__}: {e}" for c in changes}

    def message(answer: tuple[int, str] | None) -> str | None:
        if answer is None:
            return None
        code, text = answer
        return Denied(text) if code == KafkaError.CLUSTER_AUTHORIZATION_FAILED else text

    return {c.user: message(answers.get(c.user)) for c in changes}


def _set_quotas(admin: Admin, changes: list[SetUserQuotas], result: Result, env: Env) -> None:
    answers = _alter_quotas(admin, changes, env.validate_only)
    _record(result, changes, lambda c: answers[c.user])


def _delete_topics(admin: Admin, changes: list[DeleteTopic], result: Result, env: Env) -> None:
    if env.validate_only:  # nor has DeleteTopics
        return
    futures = admin.delete_topics([c.topic for c in changes], request_timeout=TIMEOUT)
    _collect(result, changes, futures, lambda c: c.topic)


def _raise_replication(admin: Admin, changes: list[RaiseReplication], result: Result,
                       env: Env) -> None:
    """Throttle, start (or resume), wait in sync, unthrottle, elect leaders, raise min ISR.

    Interrupted (Ctrl-C, a killed CI job), the move goes on in the brokers, still throttled;
    the next apply lists the running reassignments and follows them instead of starting new
    ones. The throttle goes only once every new replica is in sync.
    """
    if env.validate_only:
        _judge_raise(admin, changes, result)
        return
    live = list(changes)

    def drop(failed: Mapping[str, str | None], what: str) -> None:
        for c in [c for c in live if failed.get(c.topic)]:
            result.failed.append((c, f"{what}: {failed[c.topic]}"))
            live.remove(c)

    # Topics' throttled replicas first, then the brokers' rates, then wait until every broker
    # shows its rate: brokers apply metadata in order, so the topics' lists are in force too,
    # and no byte is copied unthrottled (a small move would otherwise finish in that gap).
    answers = _alter_configs(admin, _topic_configs(live))
    drop({n: m for (_, n), m in answers.items()}, "setting the throttle")
    if not live:  # every topic's throttle refused: each is reported failed, nothing moves
        return
    brokers = _move_brokers(live)
    rates = _alter_configs(admin, _broker_rates(brokers, live[0].throttle))
    if not (bad := {b: m for (_, b), m in rates.items() if m}):
        bad = _await_rates(admin, brokers, live[0].throttle)
    if bad:
        for c in live:
            result.failed.append((c, f"throttling broker(s) {', '.join(bad)} failed: "
                                     f"{next(iter(bad.values()))}"))
        return

    # Resume, never restart: a partition moving already (or done since the plan) is left be.
    running = admin.list_reassignments()
    md = admin.list_topics(timeout=TIMEOUT)
    start = {(c.topic, m.partition): m.replicas.after for c in live for m in c.moves
             if (c.topic, m.partition) not in running and not _in_sync(md, c.topic, m.partition,
                                                                          m.replicas.after)}
    errors = admin.alter_reassignments(start) if start else {}
    drop({t: f"partition {p}: {e}" for (t, p), e in errors.items() if e}, "starting the reassignment")
    if not live:
        return

    if not _wait(admin, live, env):
        for c in live:
            result.failed.append((c, "the reassignment is still running (its replicas are not all "
                                     "in sync yet); it goes on in the brokers, throttled: run "
                                     "apply again to follow and finish it"))
        return
    _clear_throttle(admin, {c.topic: list(replication.TOPIC_THROTTLES) for c in live})
    moved = [TopicPartition(c.topic, m.partition) for c in live for m in c.moves]
    # Per partition "election not needed" is fine, and so is any other error: the
    # controller's periodic preferred-leader rebalance gets there later anyway. (No timeout
    # argument: confluent-kafka 2.16.1's elect_leaders raises SystemError on any keyword.)
    with contextlib.suppress(Exception):
        admin.elect_leaders(ElectionType.PREFERRED, moved).result()
    answers = _alter_configs(admin, {(ResourceType.TOPIC, c.topic):
                                     {MIN_ISR: str(c.min_insync_replicas.after)} for c in live})
    _record(result, live, lambda c: answers[(ResourceType.TOPIC, c.topic)] and
            f"replicas in sync, but raising {MIN_ISR} failed: {answers[(ResourceType.TOPIC, c.topic)]}")


def _judge_raise(admin: Admin, changes: list[RaiseReplication], result: Result) -> None:
    """Validate-only: the configs a move sets on its topics, with min ISR at its final value
    (what the topic ends with), then the brokers' throttled rates."""
    configs = _topic_configs(changes)
    for c in changes:
        configs[(ResourceType.TOPIC, c.topic)] |= {MIN_ISR: str(c.min_insync_replicas.after)}
    answers = _alter_configs(admin, configs, validate_only=True)
    _record(result, changes, lambda c: answers[(ResourceType.TOPIC, c.topic)])
    rates = _alter_configs(admin, _broker_rates(_move_brokers(changes), changes[0].throttle),
                           validate_only=True)
    result.unowned += [(f"the replication throttle on broker {b}", msg)
                       for (_, b), msg in rates.items() if msg]


def _move_brokers(changes: Iterable[RaiseReplication]) -> set[int]:
    """Every broker a move copies from or to: each gets the throttled rates."""
    return {b for c in changes for m in c.moves for b in (*(m.replicas.before or ()), *m.new_replicas)}


def _await_rates(admin: KafkaAdmin, brokers: Iterable[int], rate: int,
                 timeout: float = TIMEOUT) -> dict[str, str]:
    """Each broker's own answer for its throttled rates, until all show `rate`; what is still
    missing at `timeout`, by broker."""
    missing: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    for b in sorted(set(brokers)):
        res = ConfigResource(ResourceType.BROKER, str(b))
        while True:
            try:  # one broker resource per call (librdkafka), answered by that broker itself
                cfg = admin.describe_configs([res], request_timeout=TIMEOUT)[res].result()
                shown = {k: cfg[k].value if k in cfg else None for k in replication.BROKER_RATES}
            except Exception as e:  # retried until the deadline
                shown = {"error": _message(e)}
            if all(v == str(rate) for v in shown.values()):
                break
            if time.monotonic() > deadline:
                missing[str(b)] = f"broker still shows {shown} after {timeout:.0f} s"
                break
            time.sleep(0.2)
    return missing


def _wait(admin: Admin, changes: list[RaiseReplication], env: Env) -> bool:
    """Poll until no partition of these topics is moving and every target replica is in sync.
    False when env.wait_s (or the default) runs out first."""
    targets = {(c.topic, m.partition): m.replicas.after for c in changes for m in c.moves}
    copying = {(c.topic, m.partition, b): m.bytes // max(len(m.new_replicas), 1)
               for c in changes for m in c.moves for b in m.new_replicas}
    total = sum(copying.values())
    wait_s = env.wait_s
    if wait_s is None:
        wait_s = max(300.0, 3 * replication.estimate_seconds(
            [m for c in changes for m in c.moves], changes[0].throttle))
    started = time.monotonic()
    topics = sorted({c.topic for c in changes})
    while True:
        md = admin.list_topics(timeout=TIMEOUT)
        running = admin.list_reassignments()
        done = sum(1 for (t, p), want in targets.items()
                   if (t, p) not in running and _in_sync(md, t, p, want))
        sizes = admin.log_dir_sizes(topics, {b for (_, _, b) in copying})
        copied = sum(min(sizes.get(k, 0), n) for k, n in copying.items())
        if env.progress:
            env.progress(Progress(done, len(targets), total if done == len(targets) else copied,
                                  total, time.monotonic() - started))
        if done == len(targets):
            return True
        if time.monotonic() - started > wait_s:
            return False
        time.sleep(POLL_S)


def _in_sync(md: Any, topic: str, partition: int, want: tuple[int, ...] | None) -> bool:
    t = md.topics.get(topic)
    p = t.partitions.get(partition) if t else None
    return bool(p) and set(p.replicas) == set(want or ()) and set(want or ()) <= set(p.isrs)


def _clear_throttle(admin: KafkaAdmin, topics: Mapping[str, list[str]]) -> dict[str, str | None]:
    """Brokers' throttled rates first, then the topics' throttled replicas: the topic configs
    are what the next plan sees, so an interruption in between still leaves a trace to clean."""
    brokers = sorted(admin.list_topics(timeout=TIMEOUT).brokers)
    rates = _alter_configs(admin, _broker_rates(brokers, None))
    if bad := [m for m in rates.values() if m]:
        return dict.fromkeys(topics, f"removing the brokers' throttled rates failed: {bad[0]}")
    answers = _alter_configs(admin, {(ResourceType.TOPIC, t): dict.fromkeys(keys)
                                     for t, keys in topics.items()})
    return {n: m for (_, n), m in answers.items()}


def _clear_throttles(admin: Admin, changes: list[ClearThrottle], result: Result, env: Env) -> None:
    if env.validate_only:  # it only removes what an earlier apply set
        return
    answers = _clear_throttle(admin, {c.topic: list(c.configs) for c in changes})
    _record(result, changes, lambda c: answers.get(c.topic))


HANDLERS: dict[type[Change], Handler] = {
    CreateTopic: _create_topics, AddPartitions: _add_partitions,
    AlterTopicConfigs: _alter_topic_configs, CreateAcl: _create_acls, DeleteAcl: _delete_acls,
    CreateScramUser: _upsert_scram, RotateScramPassword: _upsert_scram,
    SetUserQuotas: _set_quotas, DeleteTopic: _delete_topics, RaiseReplication: _raise_replication,
    ClearThrottle: _clear_throttles,
}


def execute(admin: Admin, plan: Plan, passwords: Mapping[str, str],
            progress: Callable[[Progress], None] | None = None, wait_s: float | None = None) -> Result:
    """Run every batch in ORDER."""
    return _run(admin, plan, Env(passwords, progress, wait_s))


def validate(admin: Admin, plan: Plan) -> tuple[list[str], list[str]]:
    """The handlers in validate-only mode: creates, partition growth, config, quota and
    throttle changes are judged by the brokers (no effect; the other APIs cannot validate).

    Returns what they reject and what they would not judge: Kafka authorizes a validate_only
    request like the real one, so a read-only principal (the pull-request planner) gets
    "denied", which says nothing about the change. Apply, as a principal that may, asks again."""
    result = _run(admin, plan, Env(validate_only=True))
    problems: list[str] = []
    unjudged: list[str] = []
    for what, msg in [(f"{c.KIND} {c.describe()}", m) for c, m in result.failed] + result.unowned:
        if isinstance(msg, Denied):
            unjudged.append(what)
        elif msg:
            problems.append(f"broker rejects {what}: {msg}")
    return problems, unjudged


def _run(admin: Admin, plan: Plan, env: Env) -> Result:
    """Every batch in ORDER; SCRAM creates and rotations share one request."""
    result = Result()
    scram = plan.of(CreateScramUser) + plan.of(RotateScramPassword)
    for cls in CHANGE_TYPES:
        batch = scram if cls is CreateScramUser else [] if cls is RotateScramPassword else plan.of(cls)
        if batch:
            HANDLERS[cls](admin, batch, result, env)
    return result
