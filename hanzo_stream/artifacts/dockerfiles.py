"""The Dockerfiles of the two published images (images/Dockerfile.reconciler, .spark).

Rendered from versions.py and jars.py, so a pin is changed in one place and the Dockerfiles
follow: `python -m hanzo_stream.artifacts.dockerfiles` writes them, and a unit test holds the files in
the repository to this rendering. (The local Kubernetes builds its images without Docker or
a registry, from the same pins: hanzo_stream/kube/images.py.)
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import jars
from . import versions as v

IMAGES = Path(__file__).resolve().parents[2] / "images"
APP_HOME = "/opt/hanzo-stream"  # where infra/ expects the repository files and jars
JMX_AGENT = f"{APP_HOME}/jmx/jmx_prometheus_javaagent.jar"  # infra/settings.py JMX_AGENT_IN_IMAGE
HEADER = ("# Rendered by `python -m hanzo_stream.artifacts.dockerfiles` from\n"
          "# hanzo_stream/artifacts/versions.py and hanzo_stream/artifacts/jars.py; edit those, not this\n"
          "# file. Build from the repository root:\n")


def reconciler() -> str:
    """The package and its CLI, plus the brokers' JMX agent (checked against its SHA-256)."""
    return f"""# syntax=docker/dockerfile:1
{HEADER}#   docker build -f images/Dockerfile.reconciler -t {v.RECONCILER_IMAGE} .
FROM {v.PYTHON_BASE_IMAGE}
WORKDIR {APP_HOME}
ADD --chmod=644 --checksum=sha256:{v.JMX_EXPORTER_SHA256} \\
    {jars.central_url(jars.JMX_AGENT)} \\
    {JMX_AGENT}
COPY pyproject.toml README.md ./
COPY hanzo_stream ./hanzo_stream
RUN pip install --no-cache-dir . && useradd -u 10001 -M hanzo
USER 10001
ENTRYPOINT ["hanzo-stream"]
"""


def spark() -> str:
    """The jobs, their specs and the registry on the official Spark image, with the Kafka
    connector and s3a baked into /opt/hanzo-stream/jars (nothing is resolved at start-up)."""
    fetches = " \\\n".join(f"             {jars.central_url(c)}"
                           for c in [*jars.spark_connector(), *jars.SPARK_S3A])
    return f"""# syntax=docker/dockerfile:1
{HEADER}#   docker build -f images/Dockerfile.spark -t {v.SPARK_IMAGE} .
FROM {v.SPARK_BASE_IMAGE}
USER root
WORKDIR {APP_HOME}
COPY pyproject.toml README.md topics.yaml ./
COPY hanzo_stream ./hanzo_stream
COPY schemas ./schemas
COPY spark ./spark
COPY consumers ./consumers
RUN pip install --no-cache-dir . \\
 && mkdir jars && cd jars \\
 && for url in \\
{fetches}; do \\
      curl -fsSLO "$url"; done
USER 185
"""


RENDERED = {"Dockerfile.reconciler": reconciler, "Dockerfile.spark": spark}


def main() -> int:
    IMAGES.mkdir(exist_ok=True)
    for name, render in RENDERED.items():
        (IMAGES / name).write_text(render())
        print(f"wrote {IMAGES / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
