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

need=()
command -v promtool >/dev/null && command -v prometheus >/dev/null || need+=(prometheus)
command -v prometheus-alertmanager >/dev/null || command -v alertmanager >/dev/null \
  || need+=(prometheus-alertmanager)
if [ ${#need[@]} -gt 0 ]; then
  echo "==> apt-get install ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  # Keep the package's postinst from starting a system Prometheus on :9090.
  added_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod 755 /usr/sbin/policy-rc.d
    added_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  [ -z "$added_policy" ] || $SUDO rm -f /usr/sbin/policy-rc.d
fi
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
