"""Spark's class-data archive (AppCDS) for local drivers: the classes a driver loads, mapped
from one file instead of read and verified out of 276 jars at every start.

A local job's driver spends most of its start loading classes. Measured on this machine's
2 cores (a session, then a small aggregation): start 16.5 -> 5.8 s, first query 8.3 -> 2.8 s.
The suite and `local up` start dozens of drivers, and a restarted job is back sooner.

`build()` (run once by `python -m hanzo_stream.local.install`) starts a driver with
`-XX:ArchiveClassesAtExit`, runs the kinds of work the jobs do (Kafka-less: a stateful
stream on RocksDB, foreachBatch, Arrow, VARIANT, Parquet) and keeps the archive the JVM
writes as it exits. The file's name is a digest of the java binary and PySpark's jars, so
a new JDK or Spark makes a new archive; a JVM that finds the archive unusable says so and
starts without it. Local drivers in the quick JIT mode use it (hanzo_stream/jvm.py); pods
and benchmarks do not, as production would not.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..paths import cache_dir

FORMAT = 1  # bump when the training changes


def _java() -> Path:
    home = os.environ.get("JAVA_HOME")
    found = Path(home, "bin", "java") if home else Path(shutil.which("java") or "java")
    return found.resolve()


def _spark_jars() -> list[Path]:
    import pyspark

    return sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))


def path() -> Path:
    """Where the archive of this JDK and this PySpark is (whether or not it exists yet)."""
    h = hashlib.sha256(f"{FORMAT}\n".encode())
    for f in (_java(), *_spark_jars()):
        st = f.stat()
        h.update(f"{f}\t{st.st_size}\t{st.st_mtime_ns}\n".encode())
    return cache_dir() / "cds" / f"spark-{h.hexdigest()[:20]}.jsa"


def flags() -> list[str]:
    """The driver's flag that maps the archive, once build() made it."""
    p = path()
    return [f"-XX:SharedArchiveFile={p}"] if p.exists() else []


def build(timeout: float = 600) -> Path:
    """Make the archive once (a driver doing the jobs' kinds of work, ~40 s); kept across runs."""
    dest = path()
    if dest.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    for old in dest.parent.glob("spark-*.jsa"):  # another JDK's or Spark's
        old.unlink(missing_ok=True)
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}.partial")
    with tempfile.TemporaryDirectory(prefix="hanzo-stream-cds-") as work:
        env = {**os.environ, "HANZO_STREAM_CDS_OUT": str(tmp), "HANZO_STREAM_CDS_WORK": work}
        done = subprocess.run([sys.executable, "-m", __name__], env=env, capture_output=True,
                              text=True, timeout=timeout)
    if done.returncode != 0 or not tmp.exists():
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"the Spark class archive was not made (exit {done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()[-800:]}")
    tmp.rename(dest)
    return dest


def _train(out: str, work: Path) -> None:
    """A driver through what the jobs do, then a clean JVM exit (the archive is written then)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from ..jvm import jit_flags
    from .spark import BASE_CONF, connector_jars

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    conf = {**BASE_CONF, "spark.app.name": "hanzo-stream-class-archive", "spark.master": "local[2]",
            "spark.jars": ",".join(str(j) for j in connector_jars()),
            "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.extraJavaOptions": " ".join(
                [*jit_flags(), f"-XX:ArchiveClassesAtExit={out}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"])}
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    proc = SparkContext._gateway.proc  # the driver JVM: waited for below, so the archive is whole

    fields = F.struct((F.col("id") % 7).alias("team"), F.lit(0.5).alias("cost"))
    events = spark.range(2000).select(F.col("id"), F.to_json(fields).alias("j"))
    parsed = events.select("id", F.parse_json("j").alias("v")).select(
        "id", F.expr("try_variant_get(v, '$.team', 'int')").alias("team"),
        F.expr("try_cast(variant_get(v, '$.cost', 'string') as decimal(18,6))").alias("cost"))
    parsed.groupBy("team").agg(F.sum("cost")).toPandas()
    parsed.write.mode("overwrite").parquet(str(work / "batch"))

    def sink(df, batch_id):
        df.toPandas()
        df.write.mode("append").parquet(str(work / "stream"))

    stream = (spark.readStream.format("rate").option("rowsPerSecond", 200).load()
              .withWatermark("timestamp", "1 second")
              .groupBy(F.window("timestamp", "1 second"), (F.col("value") % 3).alias("k")).count())
    query = (stream.writeStream.outputMode("append").foreachBatch(sink)
             .option("checkpointLocation", str(work / "checkpoint"))
             .trigger(processingTime="1 second").start())
    query.awaitTermination(12)
    query.stop()
    spark.stop()
    proc.stdin.close()  # the gateway exits on EOF: System.exit, then the dump
    proc.wait(timeout=300)


if __name__ == "__main__":
    _train(os.environ["HANZO_STREAM_CDS_OUT"], Path(os.environ["HANZO_STREAM_CDS_WORK"]))
