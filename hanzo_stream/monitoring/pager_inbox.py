"""A PagerDuty Events API v2 endpoint on this machine: where pages land when PagerDuty cannot.

This machine reaches no PagerDuty, so the local platform points Alertmanager's PagerDuty
receiver here (production points it at https://events.pagerduty.com/v2/enqueue). It checks
what PagerDuty checks (the routing key, `event_action`, a trigger's `summary`, `source` and
`severity`) and answers like it (202 with the dedup key, 400 with errors), and keeps every
accepted event as one JSON line, with the routing key replaced by whether it matched: the
inbox file is read by people and tests, and a secret never lands in a file.

    python -m hanzo_stream.monitoring.pager_inbox --listen 127.0.0.1:0 --out pages.jsonl
    (expected routing key in HANZO_STREAM_PAGERDUTY_ROUTING_KEY)
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROUTING_KEY_ENV = "HANZO_STREAM_PAGERDUTY_ROUTING_KEY"
PATH = "/v2/enqueue"
SEVERITIES = {"critical", "error", "warning", "info"}
ACTIONS = {"trigger", "acknowledge", "resolve"}


def check(event: object, routing_key: str) -> list[str]:
    """PagerDuty's validation of one event; empty when it would be accepted."""
    if not isinstance(event, dict):
        return ["the event must be a JSON object"]
    errors = []
    if not hmac.compare_digest(str(event.get("routing_key", "")), routing_key):
        errors.append("'routing_key' is invalid")
    action = event.get("event_action")
    if action not in ACTIONS:
        errors.append(f"'event_action' must be one of {', '.join(sorted(ACTIONS))}")
    if action == "trigger":
        payload = event.get("payload") if isinstance(event.get("payload"), dict) else {}
        for field in ("summary", "source"):
            if not str(payload.get(field, "")).strip():
                errors.append(f"'payload.{field}' is missing or blank")
        if payload.get("severity") not in SEVERITIES:
            errors.append(f"'payload.severity' must be one of {', '.join(sorted(SEVERITIES))}")
    elif not event.get("dedup_key"):
        errors.append("'dedup_key' is required to acknowledge or resolve")
    return errors


def redacted(event: dict, routing_key: str) -> dict:
    """The event as kept: everything but the routing key, and whether that matched."""
    out = {k: v for k, v in event.items() if k != "routing_key"}
    out["routing_key_matches"] = hmac.compare_digest(str(event.get("routing_key", "")), routing_key)
    return out


def make_server(host: str, port: int, routing_key: str,
                keep: Callable[[dict], None]) -> ThreadingHTTPServer:
    """Bind the endpoint (port 0: any free one); `keep` gets each accepted, redacted event."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name): a health check
            self._answer(200, {"status": "ok", "post_to": PATH})

        def do_POST(self) -> None:  # noqa: N802
            if self.path.rstrip("/") != PATH:
                return self._answer(404, {"status": "not found", "message": f"POST {PATH}"})
            try:
                event = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            except ValueError:
                return self._answer(400, {"status": "invalid event", "message": "not JSON",
                                          "errors": ["the body must be JSON"]})
            errors = check(event, routing_key)
            if errors:
                return self._answer(400, {"status": "invalid event",
                                          "message": "Event object is invalid", "errors": errors})
            keep(redacted(event, routing_key) | {"received_at": time.time()})
            self._answer(202, {"status": "success", "message": "Event processed",
                               "dedup_key": event.get("dedup_key")})

        def _answer(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return ThreadingHTTPServer((host, port), Handler)


class Inbox:
    """Accepted events, in memory and (optionally) appended to a JSON-lines file."""

    def __init__(self, out: Path | None = None) -> None:
        self.out = out
        self.events: list[dict] = []
        self._lock = threading.Lock()

    def keep(self, event: dict) -> None:
        with self._lock:
            self.events.append(event)
            if self.out is not None:
                with open(self.out, "a") as f:
                    f.write(json.dumps(event, sort_keys=True) + "\n")


def read(path: Path) -> list[dict]:
    """The events an inbox file holds (for `local status` and the tests)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main(argv: Iterable[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", default="127.0.0.1:0", help="host:port")
    ap.add_argument("--out", type=Path, required=True, help="JSON-lines file of accepted events")
    args = ap.parse_args(list(argv) if argv is not None else None)
    key = os.environ.get(ROUTING_KEY_ENV)
    if not key:
        sys.exit(f"set {ROUTING_KEY_ENV} to the routing key Alertmanager sends")
    host, _, port = args.listen.rpartition(":")
    server = make_server(host or "127.0.0.1", int(port), key, Inbox(args.out).keep)
    print(f"PagerDuty Events API v2 inbox at http://{host}:{server.server_address[1]}{PATH}, "
          f"events to {args.out}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    sys.exit(main())
