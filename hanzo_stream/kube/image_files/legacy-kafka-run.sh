#!/bin/sh
# Stands in for bitnami/kafka:3.7's run script, as far as the standard's insights-kafka uses it:
# every KAFKA_CFG_<NAME> variable becomes the property <name> (upper case to lower, `_` to `.`),
# the log directory is formatted with KAFKA_KRAFT_CLUSTER_ID on first start (static voters, as
# 3.7 formats), and the broker runs in the foreground. (hanzo_stream/kube/images.py)
set -eu
home=/opt/bitnami/kafka
conf="${KAFKA_CONF_FILE:-$home/config/server.properties}"
env | sed -n 's/^KAFKA_CFG_\([A-Z0-9_]*\)=/\1=/p' | while IFS='=' read -r name value; do
  printf '%s=%s\n' "$(printf %s "$name" | tr 'A-Z_' 'a-z.')" "$value"
done > "$conf"
logs=$(sed -n 's/^log\.dirs=//p' "$conf")
if [ ! -f "$logs/meta.properties" ]; then
  "$home/bin/kafka-storage.sh" format --ignore-formatted -t "$KAFKA_KRAFT_CLUSTER_ID" -c "$conf"
fi
exec "$home/bin/kafka-server-start.sh" "$conf"
