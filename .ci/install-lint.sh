#!/usr/bin/env bash
# Linters the test suite runs over the repository's GitHub workflows, idempotently:
#   - actionlint, built with `go install` from the Go module proxy at the version pinned in
#     hanzo_stream/artifacts/versions.py (cached in ~/go; the binary lands in $(go env GOPATH)/bin);
#   - shellcheck from Debian, which actionlint runs over every `run:` script.
# Called by .ci/install (which runs every .ci/install-*.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v shellcheck >/dev/null; then
  echo "==> apt-get install shellcheck"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends shellcheck >/dev/null
fi

# Go of at least versions.GO_VERSION: the machine's, or that release from the Go module proxy.
GO=$(python -m hanzo_stream.artifacts.gotoolchain)
version=$(python -c 'from hanzo_stream.artifacts.versions import ACTIONLINT_VERSION as v; print(v)')
bin="$("$GO" env GOPATH)/bin/actionlint"
if [ -x "$bin" ] && "$bin" -version 2>/dev/null | head -n 1 | grep -qx "v$version"; then
  echo "    actionlint v$version ready: $bin"
else
  echo "==> go install github.com/rhysd/actionlint/cmd/actionlint@v$version"
  "$GO" install "github.com/rhysd/actionlint/cmd/actionlint@v$version"
  "$bin" -version | head -n 1
fi
