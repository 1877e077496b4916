"""Fetch JVM artifacts from Maven Central with Maven itself, into a versioned cache.

Maven resolves the transitive runtime dependencies and keeps its own ~/.m2 cache, so a
second machine-local fetch is a copy, not a download.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from ..core.paths import cache_dir
from . import versions as v
from .versions import JMX_EXPORTER_VERSION, KAFKA_LOG4J2, KAFKA_VERSION, S3PROXY_VERSION, SCALA_BINARY

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>ai.hanzo.stream</groupId><artifactId>{name}</artifactId><version>1</version>
  <dependencies>
{deps}
  </dependencies>
</project>
"""


class FetchFailed(RuntimeError):
    pass


def spark_connector(version: str = v.SPARK_VERSION, scala: str = v.SPARK_SCALA,
                    kafka_clients: str = v.SPARK_KAFKA_CLIENTS,
                    commons_pool2: str = v.SPARK_COMMONS_POOL2) -> list[str]:
    """Spark's Kafka connector of a release and what its POM builds against (the jobs' release
    by default; bench/spark_versions.py fetches the 3.5 line's too): fetched here, baked into
    the Spark images (kube/images.py, images/Dockerfile.spark), named by infra/spark.py."""
    return [f"org.apache.spark:spark-sql-kafka-0-10_{scala}:{version}",
            f"org.apache.spark:spark-token-provider-kafka-0-10_{scala}:{version}",
            f"org.apache.kafka:kafka-clients:{kafka_clients}",
            f"org.apache.commons:commons-pool2:{commons_pool2}"]


#: s3a: hadoop-aws, its AWS SDK v2 bundle (~690 MB) and the S3 Analytics Accelerator it reads through.
SPARK_S3A = [f"org.apache.hadoop:hadoop-aws:{v.SPARK_HADOOP}",
             f"software.amazon.awssdk:bundle:{v.SPARK_AWS_SDK}",
             "software.amazon.s3.analyticsaccelerator:analyticsaccelerator-s3:"
             f"{v.SPARK_S3_ANALYTICS_ACCELERATOR}"]
JMX_AGENT = f"io.prometheus.jmx:jmx_prometheus_javaagent:{JMX_EXPORTER_VERSION}"


def jar_name(coordinate: str) -> str:
    """`group:artifact:version` -> the file Maven writes: artifact-version.jar."""
    _, artifact, version = coordinate.split(":")[:3]
    return f"{artifact}-{version}.jar"


def central_url(coordinate: str) -> str:
    group, artifact, version = coordinate.split(":")[:3]
    return (f"https://repo1.maven.org/maven2/{group.replace('.', '/')}/{artifact}/{version}/"
            f"{jar_name(coordinate)}")


def fetch(name: str, coordinates: list[str], transitive: bool = True) -> Path:
    """Copy `group:artifact:version[:classifier]` jars (and their runtime dependencies) into
    the cache."""
    dest = cache_dir() / "jars" / name
    if (dest / ".complete").exists():
        return dest
    if shutil.which("mvn") is None:
        raise FetchFailed("Maven (mvn) is not installed: run .ci/install or `apt-get install maven`")
    exclude_all = ("<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId>"
                   "</exclusion></exclusions>")
    deps = "\n".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
        f"<version>{v}</version>{f'<classifier>{c[0]}</classifier>' if c else ''}"
        f"{'' if transitive else exclude_all}</dependency>"
        for g, a, v, *c in (coord.split(":") for coord in coordinates)
    )
    tmp_dest = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp_dest, ignore_errors=True)
    with tempfile.TemporaryDirectory() as work:
        Path(work, "pom.xml").write_text(_POM.format(name=name, deps=deps))
        proc = subprocess.run(
            ["mvn", "-q", "-B", "dependency:copy-dependencies", "-DincludeScope=runtime",
             f"-DoutputDirectory={tmp_dest}"],
            cwd=work, capture_output=True, text=True,
        )
    if proc.returncode != 0:
        raise FetchFailed(f"mvn could not fetch {coordinates}:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    (tmp_dest / ".complete").write_text("\n".join(coordinates) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp_dest.rename(dest)
    return dest


def kafka_jars() -> Path:
    """The broker, its tools (kafka-consumer-groups, perf tools) and their dependencies."""
    return fetch(f"kafka-{KAFKA_VERSION}", [
        f"org.apache.kafka:kafka_{SCALA_BINARY}:{KAFKA_VERSION}",
        f"org.apache.kafka:kafka-tools:{KAFKA_VERSION}",
        f"org.apache.logging.log4j:log4j-slf4j-impl:{KAFKA_LOG4J2}",
    ])


def kafka_classpath() -> str:
    return str(kafka_jars() / "*")


def takeover_from_kafka_jars() -> Path:
    """The standard's running Kafka (3.7): what the takeover test starts from."""
    version = v.TAKEOVER_FROM_KAFKA
    return fetch(f"kafka-{version}", [
        f"org.apache.kafka:kafka_{SCALA_BINARY}:{version}",
        f"org.apache.kafka:kafka-tools:{version}",
        f"org.slf4j:slf4j-reload4j:{v.TAKEOVER_FROM_SLF4J_RELOAD4J}",
    ])


def jmx_exporter_agent() -> Path:
    d = fetch(f"jmx-exporter-{JMX_EXPORTER_VERSION}", [JMX_AGENT], transitive=False)
    return next(d.glob("jmx_prometheus_javaagent-*.jar"))


def s3proxy_jar() -> Path:
    """s3proxy's self-contained jar, as its releases ship it: Maven's resolution of its POM
    mixes Jackson 2 and 3 annotation versions and fails at start."""
    d = fetch(f"s3proxy-{S3PROXY_VERSION}-standalone",
              [f"org.gaul:s3proxy:{S3PROXY_VERSION}:jar-with-dependencies"], transitive=False)
    return next(d.glob("s3proxy-*-jar-with-dependencies.jar"))
