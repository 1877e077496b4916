"""The local platform's demo traffic: realistic events from every producing service.

Each service produces as its own registry principal through the client library
(EventProducer: the standard's settings, validation, murmur2 keys), so ACLs, schemas and
dead letters are exercised exactly as in production. A few events are broken on purpose:
  - some fail the client's own validation and are dead-lettered by the producer;
  - some are raw bytes from a "legacy" service that bypasses the client, so the Spark jobs
    find them and dead-letter them with provenance.
On its first run it also replays two hours of buffered LLM usage, so billing-agg closes its
first hourly windows at once instead of an hour after `local up`.

Run by `hanzo-stream local up` as `python -m hanzo_stream.local.demo --home DIR`; the
passwords come from DIR/credentials.json, never from the command line.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ..client import envelope
from ..client.producer import EventProducer
from ..client.router import Accepted
from ..registry import load_registry
from ..schemas.store import load as load_schemas
from . import credentials, kafka

TEAMS = [(f"team_{t}", f"org_{o}") for t, o in
         (("8f3a", "21c9"), ("1b7e", "21c9"), ("c402", "5d10"), ("77aa", "9e03"), ("e5d1", "9e03"))]
MODELS = [("zen-72b", "together", 0.9, 0.9), ("gpt-4o-mini", "openai", 0.15, 0.6),
          ("claude-sonnet-4", "anthropic", 3.0, 15.0)]  # (model, provider, USD per 1M in, per 1M out)
AUDIT = ["iam.auth.login_success", "iam.auth.login_failure", "iam.auth.logout", "iam.auth.mfa_challenge",
         "iam.authz.access_denied", "iam.authz.role_changed", "iam.auth.token_revoked"]
PAGES = ["/dashboard", "/insights", "/billing", "/settings", "/agents", "/docs"]
BROWSERS = [("Chrome", "macOS", "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 "
             "(KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"),
            ("Firefox", "Linux", "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"),
            ("Safari", "iOS", "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 "
             "(KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1")]
LOGINS = [("oauth2", "github"), ("oauth2", "google"), ("saml", "okta"), ("password", None)]
APPLICATIONS = ["app-hanzo", "console-hanzo", "cloud-hanzo"]
SERVICES = {  # principal -> share of the traffic
    "insights-capture": 0.5, "llm-gateway": 0.25, "iam-service": 0.15, "agent-gateway": 0.10}
BACKFILL = timedelta(hours=2)
INVALID_EVERY = 40  # each service's every 40th event is broken, alternately each way


@dataclass
class Sent:
    valid: int = 0
    refused_by_client: int = 0  # dead-lettered by the producer (stage producer:<service>)
    raw_invalid: int = 0  # sent around the client: the consuming job dead-letters them


def client_ip(rng: random.Random) -> str:
    """A documentation address (RFC 5737 / RFC 3849), one in five IPv6."""
    if rng.random() < 0.2:
        return f"2001:db8::{rng.randrange(1, 0xFFFF):x}"
    return f"203.0.113.{rng.randrange(1, 255)}"


def insights(rng: random.Random, at: datetime) -> dict[str, Any]:
    """Like the standard's insights.event.captured: properties, ip, session and the client's sent_at."""
    team, _ = rng.choice(TEAMS)
    user = f"user_{rng.randrange(500)}"
    browser, os_name, _ = rng.choice(BROWSERS)
    data: dict[str, Any] = {"event": rng.choice(["$pageview", "$pageview", "$autocapture", "signup"]),
                            "distinct_id": user,
                            "properties": {"$current_url": "https://hanzo.ai" + rng.choice(PAGES),
                                           "$browser": browser, "$os": os_name,
                                           "plan": rng.choice(["free", "pro", "team"])},
                            "ip": client_ip(rng), "session_id": f"sess_{user[5:]}_{at:%H}",
                            "sent_at": envelope.iso_ms(at - timedelta(milliseconds=rng.randrange(20, 900)))}
    return envelope.build("insights.event.captured", "insights-capture", data, team_id=team,
                          timestamp=at)


def llm_usage(rng: random.Random, at: datetime) -> dict[str, Any]:
    """Like the standard's llm.usage.completed; cost_usd in dollars with up to 6 decimal places."""
    team, org = rng.choice(TEAMS)
    model, provider, per_in, per_out = rng.choice(MODELS)
    prompt, completion = rng.randrange(50, 4000), rng.randrange(10, 1200)
    cache_hit = rng.random() < 0.05
    cost = 0 if cache_hit else round((prompt * per_in + completion * per_out) / 1_000_000, 6)
    data = {"request_id": f"req_{rng.getrandbits(48):012x}", "model": model, "provider": provider,
            "prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion, "latency_ms": rng.randrange(150, 9000),
            "cost_usd": cost, "user_id": f"user_{rng.randrange(500)}",
            "api_key_hash": f"sha256:{rng.getrandbits(256):064x}", "cache_hit": cache_hit,
            "stream": rng.random() < 0.6}
    return envelope.build("llm.usage.completed", "llm-gateway", data, team_id=team, org_id=org,
                          timestamp=at)


def audit(rng: random.Random, at: datetime) -> dict[str, Any]:
    """Like the standard's iam.auth.login_success, with the fields each audit type requires."""
    _, org = rng.choice(TEAMS)
    event_type = rng.choice(AUDIT)
    n = rng.randrange(500)
    method, provider = rng.choice(LOGINS)
    data: dict[str, Any] = {"user_id": f"user_{n}", "email": f"user{n}@hanzo.ai", "ip": client_ip(rng),
                            "user_agent": rng.choice(BROWSERS)[2], "application": rng.choice(APPLICATIONS)}
    if event_type in ("iam.auth.login_success", "iam.auth.login_failure"):
        data["method"] = method
        if provider:
            data["provider"] = provider
    if event_type == "iam.auth.login_failure":
        data["reason"] = rng.choice(["bad_password", "unknown_user", "locked_out", "oauth2_denied"])
        if data["reason"] == "unknown_user":  # no account: nobody to name
            del data["user_id"]
    elif event_type == "iam.auth.mfa_challenge":
        data["method"] = rng.choice(["mfa_totp", "webauthn"])
    elif event_type == "iam.auth.token_revoked":
        data["target"] = f"tok_{rng.getrandbits(40):010x}"
    elif event_type == "iam.authz.access_denied":
        data["target"] = rng.choice(["project/billing", "org/settings", "agents/deploy"])
        data["reason"] = "missing_permission"
    elif event_type == "iam.authz.role_changed":
        data["target"] = rng.choice(["role:admin", "role:developer", "role:viewer"])
    return envelope.build(event_type, "iam", data, org_id=org, timestamp=at)


def agent_rpc(rng: random.Random, at: datetime) -> dict[str, Any]:
    team, org = rng.choice(TEAMS)
    units = rng.randrange(1, 10)
    data = {"agent_id": f"agent_{rng.randrange(12)}", "method": rng.choice(["tools.search", "tools.fetch",
                                                                          "memory.write"]),
            "duration_ms": rng.randrange(5, 2000), "units": units, "cost_usd": round(units * 0.0005, 6)}
    return envelope.build("agent.rpc.metered", "agent-gateway", data, team_id=team, org_id=org,
                          timestamp=at)


MAKERS: dict[str, Callable[[random.Random, datetime], dict[str, Any]]] = {
    "insights-capture": insights, "llm-gateway": llm_usage, "iam-service": audit,
    "agent-gateway": agent_rpc}


def broken_for_client(event: dict[str, Any]) -> dict[str, Any]:
    """An event the client refuses (money as text, a pre-standard field, seconds-only timestamp)."""
    bad = json.loads(json.dumps(event))
    if "cost_usd" in bad["data"]:
        bad["data"]["cost_usd"] = str(bad["data"]["cost_usd"])  # money is a JSON number, not text
    elif event["type"].startswith("iam."):  # an IAM service still on the old actor_id field
        bad["data"]["actor_id"] = bad["data"].pop("user_id", "user_0")
    else:
        bad["timestamp"] = bad["timestamp"][:19] + "Z"
    return bad


def broken_raw(event: dict[str, Any]) -> bytes:
    """Bytes from a service that skips the client: truncated JSON or a field missing."""
    if event["type"].startswith("iam."):
        return json.dumps({k: v for k, v in event.items() if k != "org_id"}).encode()
    return json.dumps(event).encode()[:-7]


def breakage(n: int) -> str | None:
    """How a service's n-th event is broken: "client", "raw" or not at all.

    Counted per service, not drawn at random, so every service's broken events arrive within
    its first 80 events and both ways: the 40th is refused by the client, the 80th skips it.
    """
    if n % INVALID_EVERY:
        return None
    return "client" if n // INVALID_EVERY % 2 else "raw"


def schedule(rate: float, rng: random.Random, now: Callable[[], float]) -> Iterator[str]:
    """Which service speaks next, paced to `rate` events per second overall."""
    names, weights = list(SERVICES), list(SERVICES.values())
    interval, next_at = 1.0 / rate, now()
    while True:
        delay = next_at - now()
        if delay > 0:
            time.sleep(delay)
        next_at += interval
        yield rng.choices(names, weights)[0]


class Demo:
    def __init__(self, home: Path, registry_path: Path, schemas_dir: Path, seed: int | None = None):
        self.home = home
        self.rng = random.Random(seed)
        cluster = kafka.LocalCluster.load(home / "kafka")
        if cluster is None:
            raise SystemExit(f"no local broker in {home}: run `hanzo-stream local up` first")
        registry, schemas = load_registry(registry_path), load_schemas(schemas_dir)
        creds = credentials.of_home(home, registry.principal_names())
        self.producers = {p: EventProducer.connect(cluster.connection(p, creds.password(p)), stage=p,
                                                   registry=registry, schemas=schemas,
                                                   client_id=f"demo-{p}")
                          for p in SERVICES}
        self.topics = {p: next(t.name for t in registry.topics if p in t.producers) for p in SERVICES}
        self.sent = Sent()
        self.counts = dict.fromkeys(SERVICES, 0)
        self.state_file = home / "demo-state.json"  # demo.json is the Daemon's

    def emit(self, principal: str, at: datetime, breakable: bool = True) -> None:
        event = MAKERS[principal](self.rng, at)
        producer = self.producers[principal]
        how = None
        if breakable:  # the backfill is never broken and does not count
            self.counts[principal] += 1
            how = breakage(self.counts[principal])
        if how is None:
            if isinstance(producer.send(event), Accepted):
                self.sent.valid += 1
        elif how == "client":
            producer.send(broken_for_client(event))
            self.sent.refused_by_client += 1
        else:  # a service that skips the client: nothing checks it before the job does
            producer.producer.produce(self.topics[principal], broken_raw(event), b"legacy")
            self.sent.raw_invalid += 1
        producer.poll(0)

    def backfill(self) -> None:
        """Two hours of LLM usage and agent RPC the gateways had buffered, once per state
        directory: billing-agg and rpc-billing close their first hours at once."""
        if self.state_file.exists() and json.loads(self.state_file.read_text()).get("backfilled"):
            return
        end = datetime.now(UTC) - timedelta(minutes=1)
        t, n = end - BACKFILL, 0
        while t < end:
            self.emit("llm-gateway", t, breakable=False)
            self.emit("agent-gateway", t, breakable=False)
            t, n = t + timedelta(seconds=6), n + 1
        for p in ("llm-gateway", "agent-gateway"):
            self.producers[p].flush_or_raise()
        self.state_file.write_text(json.dumps({"backfilled": end.isoformat()}))
        print(f"backfilled {n} llm.usage.completed and {n} agent.rpc.metered events from {BACKFILL} "
              "before now", flush=True)

    def run(self, rate: float, duration: float) -> Sent:
        stop = {"now": False}
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.update(now=True))
        self.backfill()
        deadline, last_report = time.monotonic() + duration, time.monotonic()
        for principal in schedule(rate, self.rng, time.monotonic):
            if stop["now"] or time.monotonic() >= deadline:
                break
            self.emit(principal, datetime.now(UTC))
            if time.monotonic() - last_report >= 30:
                last_report = time.monotonic()
                print(f"sent {self.sent}", flush=True)
        for p in self.producers.values():
            p.flush(30)
        print(f"stopped; sent {self.sent}", flush=True)
        return self.sent


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m hanzo_stream.local.demo", description=__doc__)
    ap.add_argument("--home", type=Path, required=True, help="the local platform's state directory")
    ap.add_argument("--rate", type=float, default=20.0, help="events per second, all services")
    ap.add_argument("--duration", type=float, default=12 * 3600, help="seconds, then it stops")
    ap.add_argument("--registry", type=Path, default=Path("topics.yaml"))
    ap.add_argument("--schemas", type=Path, default=Path("schemas"))
    args = ap.parse_args(argv)
    Demo(args.home.resolve(), args.registry, args.schemas).run(args.rate, args.duration)


if __name__ == "__main__":
    sys.exit(main())
