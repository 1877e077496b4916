#!/usr/bin/env bash
# Monitoring tools for the tests and `hanzo-stream local up`, idempotently:
#   - prometheus + promtool from Debian's `prometheus` package (rule checks, promtool unit
#     tests, the local Prometheus), and Alertmanager + amtool from `prometheus-alertmanager`
#     (alert routing to PagerDuty). Their system services are never left running: the
#     platform starts its own with the project's config.
#   - the consumer-lag exporter is hanzo_stream.monitoring.lag_exporter (Python, installed
#     with the package): danielqsj/kafka_exporter cannot be fetched here (the Go module
#     proxy refuses that module), so nothing to `go install`.
#   - the JMX exporter agent jar comes from Maven Central via python -m hanzo_stream.local.install.
# Called by .ci/install (which runs every .ci/install-*.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/apt.sh

need=()
command -v promtool >/dev/null && command -v prometheus >/dev/null || need+=(prometheus)
command -v prometheus-alertmanager >/dev/null || command -v alertmanager >/dev/null \
  || need+=(prometheus-alertmanager)
apt_install_quietly ${need[@]+"${need[@]}"}
for unit in prometheus prometheus-alertmanager; do
  if command -v systemctl >/dev/null && systemctl is-active --quiet "$unit" 2>/dev/null; then
    systemctl stop "$unit" || true
  fi
done

promtool --version 2>&1 | head -1
python -c "import hanzo_stream.monitoring.lag_exporter" \
  || { echo "hanzo_stream is not installed: run pip install -e .[dev]" >&2; exit 1; }
echo "    monitoring tools ready: $(command -v prometheus), $(command -v promtool)," \
  "$(command -v prometheus-alertmanager || command -v alertmanager), $(command -v amtool)"
