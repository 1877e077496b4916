"""The local Spark drivers' class archive (hanzo_stream/artifacts/jvm.py): its jars and its training.

A local job's driver spends most of its start loading classes out of PySpark's 276 jars.
Measured on this machine's 2 cores (a session, then a small aggregation): start 16.5 -> 5.8 s,
first query 8.3 -> 2.8 s; two Spark job tests 217 -> 166 s side by side. The training runs
the kinds of work the jobs do, without Kafka: a stateful stream on RocksDB, foreachBatch,
Arrow, VARIANT, Parquet.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..artifacts import jvm

NAME = "spark"


def spark_jars() -> list[Path]:
    import pyspark

    return sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))


def flags(env: dict[str, str] | None = None) -> list[str]:
    return jvm.archive_flags(NAME, spark_jars(), env)


def build() -> Path:
    """Made once (~80 s), by `python -m hanzo_stream.local.install`."""
    return jvm.build_archive(NAME, spark_jars(), __name__)


def _train(out: str, work: Path) -> None:
    """A driver through what the jobs do, then a clean JVM exit (the archive is written then)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from .spark import BASE_CONF, connector_jars

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    conf = {**BASE_CONF, "spark.app.name": "hanzo-stream-class-archive", "spark.master": "local[2]",
            "spark.jars": ",".join(str(j) for j in connector_jars()),
            "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.extraJavaOptions": " ".join([*jvm.jit_flags(), *jvm.dump_flags(out)])}
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
    _train(sys.argv[1], Path(sys.argv[2]))
