#!/bin/sh
# Run one Kafka class on the image's JVM with Kafka's jars (hanzo_stream/kube/images.py;
# our own script, not Apache's). It honours what the official image's scripts read:
# KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS, KAFKA_JMX_OPTS, KAFKA_LOG4J_OPTS (default:
# config/tools-log4j2.properties, warnings to stderr), KAFKA_OPTS and LOG_DIR.
set -f  # the *_OPTS variables are split into words, never globbed
if [ $# -lt 1 ]; then
  echo "USAGE: $0 classname [opts]" >&2
  exit 1
fi
base_dir=$(cd "$(dirname "$0")/.." && pwd)
LOG_DIR=${LOG_DIR:-$base_dir/logs}
[ -d "$LOG_DIR" ] || mkdir -p "$LOG_DIR"
java=java
[ -z "${JAVA_HOME:-}" ] || java=$JAVA_HOME/bin/java
exec "$java" ${KAFKA_HEAP_OPTS:--Xmx256M} \
  ${KAFKA_JVM_PERFORMANCE_OPTS:--server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true} \
  ${KAFKA_JMX_OPTS:-} \
  ${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=$base_dir/config/tools-log4j2.properties} \
  "-Dkafka.logs.dir=$LOG_DIR" -cp "$base_dir/libs/*" ${KAFKA_OPTS:-} "$@"
