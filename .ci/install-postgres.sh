#!/usr/bin/env bash
# PostgreSQL for the settlement jobs' postgres sink: `local up` and the tests run Debian's
# server binaries as their own process (hanzo_stream/local/postgres.py), so the package's
# own cluster is never started (apt_install_quietly keeps services down). Run as root, the
# server runs as the package's `postgres` user. Called by .ci/install.
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/apt.sh

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || ! id postgres >/dev/null 2>&1; then
  apt_install_quietly postgresql
fi
if command -v systemctl >/dev/null && systemctl is-active --quiet postgresql 2>/dev/null; then
  echo "    note: the system's own PostgreSQL service runs; the platform starts a server of its own"
fi
echo "    PostgreSQL ready: $(ls -d /usr/lib/postgresql/*/bin | tail -1)"
