"""The Spark session a job runs in: connector jars from Maven Central, modest local defaults.

Jars are fetched once into the cache (hanzo_stream.artifacts.jars) and passed with spark.jars,
so a job start never resolves dependencies (spark.jars.packages would, every time, and
fails without a network). Only the four jars the connector needs are fetched: its Maven
closure would add a second Hadoop, Scala and SLF4J next to PySpark's own.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..artifacts import jars
from ..artifacts.jvm import jit_flags
from . import s3, spark_archive
from .s3 import S3Access
from .spec import JobSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

from ..artifacts.versions import SPARK_AWS_SDK as AWS_SDK
from ..artifacts.versions import SPARK_COMMONS_POOL2 as COMMONS_POOL2
from ..artifacts.versions import SPARK_HADOOP as HADOOP
from ..artifacts.versions import SPARK_KAFKA_CLIENTS as KAFKA_CLIENTS
from ..artifacts.versions import SPARK_SCALA as SCALA
from ..artifacts.versions import SPARK_VERSION

DEFAULT_MASTER = "local[2]"


def connector_jars(version: str = SPARK_VERSION, scala: str = SCALA, kafka_clients: str = KAFKA_CLIENTS,
                   commons_pool2: str = COMMONS_POOL2) -> list[Path]:
    """The Kafka connector of a Spark release (jars.spark_connector), fetched."""
    d = jars.fetch(f"spark-kafka-{version}",
                   jars.spark_connector(version, scala, kafka_clients, commons_pool2), transitive=False)
    return sorted(d.glob("*.jar"))


def s3a_jars() -> list[Path]:
    """jars.SPARK_S3A, fetched only when a job uses s3a:// paths."""
    d = jars.fetch(f"hadoop-aws-{HADOOP}-sdk-{AWS_SDK}", jars.SPARK_S3A, transitive=False)
    return sorted(d.glob("*.jar"))


def uses_s3a(spec: JobSpec) -> bool:
    paths = [spec.checkpoint, *(str(s.get("path", "")) for s in spec.sinks.values())]
    return any(p.startswith("s3a://") for p in paths)


def s3a_conf(store: S3Access) -> dict[str, str]:
    """Hadoop S3A settings for an S3-compatible store (Hanzo Storage/MinIO, local s3proxy).

    Credentials are not configuration (Spark prints its configuration): the SDK's default
    chain reads AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or the pod's web identity).
    """
    conf = {"spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
            "spark.hadoop.fs.s3a.path.style.access": str(store.path_style).lower()}
    if store.endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = store.endpoint
        conf["spark.hadoop.fs.s3a.endpoint.region"] = store.region
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(
            store.endpoint.startswith("https")).lower()
    return conf


BASE_CONF = {  # every local and submitted job's, and the class archive's training driver
    "spark.sql.shuffle.partitions": "4",  # also the state store's partition count: fixed per checkpoint
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "2g",
    "spark.driver.maxResultSize": "1g",
    # Offsets through the AdminClient: the driver never joins a consumer group, so the
    # registry's ACLs suffice (the deprecated consumer path would need a group ACL).
    "spark.sql.streaming.kafka.useDeprecatedOffsetFetching": "false",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    # A batch commit writes each store's changes, not a snapshot of all of it (snapshots
    # go on in the background); existing checkpoints switch over in place.
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # UTC-adjusted INT64 timestamps: non-Spark Parquet readers get real instants, not INT96.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # A duplicate JSON key keeps its last value, as the client's parser does
    # (hanzo_stream/jobs/contract.py).
    "spark.sql.variant.allowDuplicateKeys": "true",
    # ANSI SQL mode (Spark 4's default), pinned: a cast that cannot hold its value fails
    # the query instead of yielding NULL, so every value the jobs read goes through try_*
    # functions (contract.py) and a malformed one is dead-lettered, never crashes or
    # silently becomes NULL. The contract parity test and the job tests run under it.
    "spark.sql.ansi.enabled": "true",
}


def session_conf(spec: JobSpec, master: str | None = None, env: dict[str, str] | None = None,
                 submitted: bool = False) -> dict[str, str]:
    """Every Spark setting of a job's session, as data (unit-tested without a JVM).

    submitted: spark-submit already chose the master, memory and --jars; leave them alone.
    """
    env = dict(os.environ) if env is None else env
    jar_list = [] if submitted else connector_jars()
    conf = {"spark.app.name": f"hanzo-stream-{spec.name}", **BASE_CONF}
    if uses_s3a(spec):
        jar_list += [] if submitted else s3a_jars()
        conf |= s3a_conf(s3.of_spec(spec, env))
    if not submitted:
        conf["spark.master"] = master or env.get("HANZO_STREAM_SPARK_MASTER") or DEFAULT_MASTER
        conf["spark.jars"] = ",".join(str(j) for j in jar_list)
        if conf["spark.master"].startswith("local"):  # nothing of a local job listens off-host
            conf["spark.driver.host"] = conf["spark.driver.bindAddress"] = "127.0.0.1"
            # The driver is the executor: the local JIT (hanzo_stream/artifacts/jvm.py) and, with it,
            # the classes mapped from the local archive (spark_archive.py).
            if flags := jit_flags(env):
                conf["spark.driver.extraJavaOptions"] = " ".join([*flags, *spark_archive.flags(env)])
    else:
        del conf["spark.driver.memory"]
    conf |= spec.spark_conf
    return conf


def build_session(spec: JobSpec, master: str | None = None) -> SparkSession:
    """A session for this job; under spark-submit the submitted master and jars win."""
    from pyspark.sql import SparkSession

    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started the JVM for us
    if not submitted:  # Python workers run this interpreter (its packages), not PATH's python3
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    for key, value in session_conf(spec, master, submitted=submitted).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("HANZO_STREAM_SPARK_LOG_LEVEL", "WARN"))
    return spark
