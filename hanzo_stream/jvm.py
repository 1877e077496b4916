"""The java command every JVM of this machine's platform starts with: one place for the JIT.

The local platform's JVMs (brokers, Kafka's tools, the schema registry, s3proxy, the local
Spark drivers) run on a developer's machine and in the test suite, where each lives for
minutes and most of its CPU goes to compiling itself. With C1 only
(`-XX:TieredStopAtLevel=1`) three brokers started, took topics.yaml and idled 30 s on
69 -> 38 CPU-seconds (ready in 24 -> 15 s), and a Spark session's start 27 -> 16 (measured on
this machine's 2 cores, docs/local-platform.md). Benchmarks measure what production runs,
so bench/ sets HANZO_STREAM_LOCAL_JIT=full. Pods get it only as the local Kubernetes
stacks' javaOptions (hanzo_stream/kube/deploy.py); other stacks run the JVMs' defaults.
"""

from __future__ import annotations

import os
from pathlib import Path

JIT_ENV = "HANZO_STREAM_LOCAL_JIT"
QUICK = ("-XX:TieredStopAtLevel=1",)
MODES = {"quick": QUICK, "full": ()}


class JitModeError(ValueError):
    pass


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    return str(Path(home, "bin", "java")) if home else "java"


def jit_flags(env: dict[str, str] | None = None) -> list[str]:
    """The JIT flags of a local JVM: C1 only unless HANZO_STREAM_LOCAL_JIT=full."""
    mode = (os.environ if env is None else env).get(JIT_ENV, "quick")
    if mode not in MODES:
        raise JitModeError(f"{JIT_ENV}={mode!r}: use 'quick' (C1 only, the default) or 'full' "
                           "(C1 and C2, as production runs)")
    return list(MODES[mode])
