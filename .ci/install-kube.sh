#!/usr/bin/env bash
# The local Kubernetes and the real Pulumi, idempotently (hanzo-stream local kube up, the
# tests under tests/integration/test_kube_*.py):
#   - containerd, runc, the CNI plugins, umoci, mmdebstrap, iptables, socat from Debian
#     (their system services are never started: the node runs its own, see hanzo_stream/kube/node.py);
#   - etcd, Kubernetes, CoreDNS, the Pulumi CLI and pulumi-resource-kubernetes built from the Go
#     module proxy (cached by version in ~/.cache/hanzo-stream/kube/bin; cold ~30 min, warm seconds);
#   - the container images, built from Debian, PyPI and Maven Central (cached likewise),
#     beside the Go builds (they need none of their binaries).
# Called by .ci/install (which runs every .ci/install-*.sh, and this one with --go first).
set -euo pipefail
cd "$(dirname "$0")/.."

# CI (.ci/run sets HANZO_STREAM_KUBE_BUILD=background): a cold build takes most of an hour on
# two cores, while most of the suite needs none of it. The Go builds and the images each run in
# the background at a lower priority beside the suite; the Kubernetes tests run last and wait
# for them (build.py and images.py lock their caches), and fail with their error.
logs="${HOME}/.cache/hanzo-stream/kube"
in_background() {  # NAME COMMAND...: once per machine at a time (a pid file), logged
  local name=$1; shift
  local pid="$logs/background-$name.pid" log="$logs/background-$name.log"
  mkdir -p "$logs"
  if [ -s "$pid" ] && kill -0 "$(cat "$pid")" 2>/dev/null; then
    echo "==> $name: already building in the background (log: $log)"
    return
  fi
  echo "==> $name: building in the background (log: $log)"
  nohup nice -n 10 "$@" >"$log" 2>&1 </dev/null &
  echo $! >"$pid"
}
go_build=(python -m hanzo_stream.kube.build)
images_build=(python -m hanzo_stream.kube.images build)
if [ "${HANZO_STREAM_COVERAGE:-}" = 1 ]; then
  # A coverage run (tests/lanes.sh) counts the image build too, wherever it runs: on a cold
  # machine here in the background, outside the lanes; tests/lanes.sh combines its data.
  rm -rf .hanzo-stream/coverage-build && mkdir -p .hanzo-stream/coverage-build
  images_build=(python -m coverage run --parallel-mode --source="$PWD/hanzo_stream"
                --data-file="$PWD/.hanzo-stream/coverage-build/data" -m hanzo_stream.kube.images build)
fi
background=""; [ "${HANZO_STREAM_KUBE_BUILD:-}" = background ] && background=1

if [ "${1:-}" = --go ]; then
  # .ci/install calls this first, before pip and Maven: the Go builds need only Python's
  # standard library and Go (fetched by build.py if the machine's is too old), so their
  # compiling overlaps those downloads.
  [ -z "$background" ] || in_background go-build "${go_build[@]}"
  exit 0
fi

. .ci/apt.sh
pkgs=(containerd runc containernetworking-plugins umoci mmdebstrap
      iptables conntrack socat iproute2 util-linux mount)
need=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need+=("$p")
done
apt_install_quietly ${need[@]+"${need[@]}"}
for unit in containerd etcd; do
  if command -v systemctl >/dev/null && systemctl is-active --quiet "$unit" 2>/dev/null; then
    systemctl stop "$unit" || true
  fi
done

if [ -n "$background" ]; then
  in_background go-build "${go_build[@]}"
  in_background images "${images_build[@]}"
else
  # The images need none of the Go binaries: both at once (their waits overlap).
  echo "==> Kubernetes, Pulumi (go build) and the images (mmdebstrap + umoci), cached"
  "${images_build[@]}" &
  images=$!
  go=0; "${go_build[@]}" || go=$?
  img=0; wait "$images" || img=$?
  [ "$go" -eq 0 ] && [ "$img" -eq 0 ]
fi
