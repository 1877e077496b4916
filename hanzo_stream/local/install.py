"""Fetch every JVM artifact the platform runs, so the first `local up` or test does not wait.

`python -m hanzo_stream.local.install` is called by .ci/install; each part adds itself to
FETCHERS so one command warms every cache.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable

from ..artifacts import jars

FETCHERS: list[tuple[str, Callable[[], object]]] = [
    ("kafka broker and tools", jars.kafka_jars),
    ("JMX Prometheus exporter agent", jars.jmx_exporter_agent),
    ("S3-compatible object store (s3proxy)", jars.s3proxy_jar),
    ("Kafka 3.7 (the takeover's starting point)", jars.takeover_from_kafka_jars),
]


def _optional(module: str, attr: str) -> Callable[[], object] | None:
    try:
        if importlib.util.find_spec(module) is None:
            return None
    except ModuleNotFoundError:  # the parent package is not in this checkout
        return None
    mod = importlib.import_module(module)
    return getattr(mod, attr, None)


def main() -> None:
    fetchers = list(FETCHERS)
    for label, module, attr in (("Spark Kafka connector", "hanzo_stream.jobs.spark", "connector_jars"),
                                ("Spark s3a (hadoop-aws, AWS SDK)", "hanzo_stream.jobs.spark", "s3a_jars"),
                                ("schema registry", "hanzo_stream.local.schema_registry", "install"),
                                ("Spark drivers' class archive (hanzo_stream/artifacts/jvm.py)",
                                 "hanzo_stream.jobs.spark_archive", "build")):
        fn = _optional(module, attr)
        if fn:
            fetchers.append((label, fn))
    for label, fn in fetchers:
        tty = sys.stdout.isatty()
        if tty:  # the first fetch can take a minute: say what is being fetched
            print(f"    {label} ...", end="", flush=True)
        t = time.monotonic()
        try:
            where = fn()
        except (OSError, RuntimeError) as e:  # FetchFailed, StartFailed: the cause, no traceback
            print(f"{chr(13) if tty else ''}    {label}: error: {e}", file=sys.stderr)
            sys.exit(1)
        if isinstance(where, list):  # a set of jars: name their folder
            where = f"{len(where)} jars in {where[0].parent}" if where else "nothing"
        print(f"{chr(13) if tty else ''}    {label}: {where} ({time.monotonic() - t:.1f}s)")


if __name__ == "__main__":
    main()
