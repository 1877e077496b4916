"""Typed changes: one frozen dataclass per operation, every changed value a Diff(before, after).

The plan's text, its JSON, apply's handlers (one per change class) and the tests all read these
same fields; nothing is looked up by string key. The shape follows Jikkou's TopicChange (typed
before/after values, one handler per operation). `KIND` names the class in the JSON plan and
sets the order in which apply runs the batches (ORDER).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from ..registry.model import Acl

T = TypeVar("T")


@dataclass(frozen=True)
class Diff(Generic[T]):
    """One value as the cluster has it (before) and as the registry wants it (after).
    None: absent (a topic being created has no `before`; a config being removed no `after`)."""

    before: T | None
    after: T | None

    def __str__(self) -> str:
        return f"{_fmt(self.before)} -> {_fmt(self.after)}"


def _fmt(v: object) -> str:
    if v is None:
        return "(unset)"
    if isinstance(v, tuple):
        return "[" + ",".join(map(str, v)) + "]"
    return str(v)


class Change:
    """What every change class offers: its kind, what it acts on, and one line for people."""

    KIND: ClassVar[str]
    SYMBOL: ClassVar[str] = "~"  # + add, ~ change, - remove

    @property
    def target(self) -> str:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def reviewed(self) -> Change:
        """The decision a reviewer approved, without values that drift between plan and apply
        (bytes on disk, whether a move already runs): what `apply --plan` compares."""
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.KIND, "target": self.target,
                **_encode(dataclasses.asdict(self))}  # type: ignore[call-overload]


# ---------------------------------------------------------------- topics

@dataclass(frozen=True)
class _TopicChange(Change):
    topic: str

    @property
    def target(self) -> str:
        return self.topic


@dataclass(frozen=True)
class CreateTopic(_TopicChange):
    KIND: ClassVar[str] = "topic.create"
    SYMBOL: ClassVar[str] = "+"
    partitions: Diff[int]
    replication_factor: Diff[int]  # after None: the brokers' default.replication.factor
    configs: dict[str, Diff[str]]

    def describe(self) -> str:
        cfg = ", ".join(f"{k}={v.after}" for k, v in self.configs.items())
        rf = self.replication_factor.after or "default"
        return f"topic {self.topic}: {self.partitions.after} partitions, RF {rf}, {cfg}"


@dataclass(frozen=True)
class AddPartitions(_TopicChange):
    """New partitions; `replicas` places them (preferred leader first) when the topic's
    replication factor is managed, so they are born at the factor the registry wants."""

    KIND: ClassVar[str] = "topic.partitions"
    partitions: Diff[int]
    replicas: tuple[tuple[int, ...], ...] = ()

    def describe(self) -> str:
        placed = f", replicas {', '.join(_fmt(r) for r in self.replicas)}" if self.replicas else ""
        return f"topic {self.topic}: partitions {self.partitions}{placed}"


@dataclass(frozen=True)
class AlterTopicConfigs(_TopicChange):
    """Set (after = value) or remove (after = None) topic configs the reconciler owns."""

    KIND: ClassVar[str] = "topic.config"
    configs: dict[str, Diff[str]]

    def describe(self) -> str:
        return f"topic {self.topic}: " + ", ".join(f"{k}: {v}" for k, v in self.configs.items())


@dataclass(frozen=True)
class DeleteTopic(_TopicChange):
    KIND: ClassVar[str] = "topic.delete"
    SYMBOL: ClassVar[str] = "-"
    partitions: int

    def describe(self) -> str:
        return f"topic {self.topic} (not in the registry; {self.partitions} partitions)"


# ---------------------------------------------------------------- replication

@dataclass(frozen=True)
class Move:
    """One partition's replica set, before and after; `bytes` is what the new replicas copy."""

    partition: int
    replicas: Diff[tuple[int, ...]]
    bytes: int = 0
    running: bool = False  # a reassignment to exactly this target is already under way

    @property
    def new_replicas(self) -> tuple[int, ...]:
        return tuple(b for b in self.replicas.after or () if b not in (self.replicas.before or ()))


@dataclass(frozen=True)
class RaiseReplication(_TopicChange):
    """A replication-factor increase as a throttled partition reassignment.

    min ISR: `min_insync_during` (if set) is applied before the move, because the live value is
    more than the current replicas allow; `min_insync_replicas.after` only once every new
    replica is in sync (replication.py says why).
    """

    KIND: ClassVar[str] = "topic.replication"
    replication_factor: Diff[int]
    min_insync_replicas: Diff[int]
    moves: tuple[Move, ...]
    throttle: int  # bytes/s per broker, leader and follower side, while the move runs
    min_insync_during: int | None = None

    @property
    def bytes(self) -> int:
        return sum(m.bytes for m in self.moves)

    @property
    def resumes(self) -> bool:
        return any(m.running for m in self.moves)

    def describe(self) -> str:
        from .replication import human_bytes

        isr = self.min_insync_replicas
        during = (f"{isr.before} -> {self.min_insync_during} before the move, "
                  if self.min_insync_during is not None else "")
        return (f"topic {self.topic}: replication factor {self.replication_factor}, "
                f"{len(self.moves)} partition(s) move, {human_bytes(self.bytes)} to copy at "
                f"{human_bytes(self.throttle)}/s per broker"
                + (" (resumes the running reassignment)" if self.resumes else "")
                + f"; min.insync.replicas {during}-> {isr.after} once all replicas are in sync")

    def reviewed(self) -> Change:
        return dataclasses.replace(self, moves=tuple(
            dataclasses.replace(m, bytes=0, running=False) for m in self.moves))


@dataclass(frozen=True)
class ClearThrottle(_TopicChange):
    """Remove a replication throttle a finished (or interrupted) reassignment left behind."""

    KIND: ClassVar[str] = "replication.throttle"
    SYMBOL: ClassVar[str] = "-"
    configs: dict[str, Diff[str]]

    def describe(self) -> str:
        return (f"topic {self.topic}: replication throttle left by an earlier apply "
                f"({', '.join(self.configs)}, and the brokers' throttled rates)")


# ---------------------------------------------------------------- ACLs and users

@dataclass(frozen=True)
class _AclChange(Change):
    acl: Acl

    @property
    def target(self) -> str:
        return self.acl.principal

    def describe(self) -> str:
        return str(self.acl)


@dataclass(frozen=True)
class CreateAcl(_AclChange):
    KIND: ClassVar[str] = "acl.create"
    SYMBOL: ClassVar[str] = "+"


@dataclass(frozen=True)
class DeleteAcl(_AclChange):
    KIND: ClassVar[str] = "acl.delete"
    SYMBOL: ClassVar[str] = "-"


@dataclass(frozen=True)
class _UserChange(Change):
    user: str

    @property
    def target(self) -> str:
        return self.user

    def describe(self) -> str:
        return f"SCRAM-SHA-512 user {self.user}" + (": rotate password" if self.SYMBOL == "~" else "")


@dataclass(frozen=True)
class CreateScramUser(_UserChange):
    KIND: ClassVar[str] = "scram.create"
    SYMBOL: ClassVar[str] = "+"


@dataclass(frozen=True)
class RotateScramPassword(_UserChange):
    KIND: ClassVar[str] = "scram.rotate"


@dataclass(frozen=True)
class SetUserQuotas(_UserChange):
    """Set (after = value) or remove (after = None) client quotas of a user entity."""

    KIND: ClassVar[str] = "quota.user"
    quotas: dict[str, Diff[float]]

    def describe(self) -> str:
        return f"client quotas of {self.user}: " + ", ".join(
            f"{k}: {_fmt(_quota(v.before))} -> {_fmt(_quota(v.after))}"
            for k, v in sorted(self.quotas.items()))


def _quota(v: float | None) -> int | float | None:
    """1048576.0 as 1048576: Kafka keeps every quota as a double; the registry writes integers."""
    return int(v) if v is not None and v == int(v) else v


#: Apply runs the batches in this order. Replication comes last: it waits for data to copy,
#: and nothing quick (a new service's ACLs) should wait behind it.
CHANGE_TYPES: tuple[type[Change], ...] = (
    CreateTopic, AddPartitions, AlterTopicConfigs, CreateAcl, DeleteAcl, CreateScramUser,
    RotateScramPassword, SetUserQuotas, DeleteTopic, RaiseReplication, ClearThrottle)
ORDER = tuple(c.KIND for c in CHANGE_TYPES)
BY_KIND = {c.KIND: c for c in CHANGE_TYPES}


# ---------------------------------------------------------------- JSON

def _encode(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _encode(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_encode(x) for x in v]
    return v


def from_dict(doc: dict[str, Any]) -> Change:
    """The inverse of Change.to_dict, typed by the change class's own annotations."""
    kind = doc.get("kind")
    if kind not in BY_KIND:
        raise ValueError(f"unknown change kind {kind!r} (known: {', '.join(ORDER)})")
    return _decode(BY_KIND[kind], {k: v for k, v in doc.items() if k != "kind"})


def _decode(tp: Any, v: Any) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if v is None:
        return None
    if dataclasses.is_dataclass(origin or tp):
        cls = origin or tp
        hints = typing.get_type_hints(cls)
        if origin is not None:  # Diff[X]: substitute X for T
            hints = {k: (args[0] if h in (T, T | None) else h) for k, h in hints.items()}
        return cls(**{f.name: _decode(hints[f.name], v[f.name])
                      for f in dataclasses.fields(cls) if f.name in v})
    if origin in (types.UnionType, typing.Union):
        return _decode(next(a for a in args if a is not type(None)), v)
    if origin is dict:
        return {k: _decode(args[1], x) for k, x in v.items()}
    if origin is tuple:
        item = args[0]
        return tuple(_decode(item, x) for x in v)
    return v


