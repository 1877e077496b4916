#!/usr/bin/env bash
# The local Kubernetes and the real Pulumi, idempotently (hanzo-stream local kube up, the
# tests under tests/integration/test_kube_*.py):
#   - containerd, runc, the CNI plugins, umoci, mmdebstrap, iptables, socat from Debian
#     (their system services are never started: the node runs its own, see hanzo_stream/kube/node.py);
#   - etcd, Kubernetes, CoreDNS, the Pulumi CLI and pulumi-resource-kubernetes built from the Go
#     module proxy (cached by version in ~/.cache/hanzo-stream/kube/bin; cold ~30 min, warm seconds);
#   - the container images, built from Debian, PyPI and Maven Central (cached likewise),
#     beside the Go builds (they need none of their binaries).
# Called by .ci/install (which runs every .ci/install-*.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
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

build() {  # the images need none of the Go binaries: both at once (their waits overlap)
  local go=0 img=0
  python -m hanzo_stream.kube.images build &
  local images=$!
  python -m hanzo_stream.kube.build || go=$?
  wait "$images" || img=$?
  [ "$go" -eq 0 ] && [ "$img" -eq 0 ]
}
if [ "${HANZO_STREAM_KUBE_BUILD:-}" = background ]; then
  # CI (.ci/run): a cold build takes most of an hour on two cores, while most of the suite
  # needs none of it. It runs beside the suite at a lower priority; the Kubernetes tests run
  # last and wait for it (build.py and images.py lock their caches), and fail with its error.
  log="${HOME}/.cache/hanzo-stream/kube/background-build.log"
  mkdir -p "$(dirname "$log")"
  echo "==> Kubernetes, Pulumi and the images: building in the background (log: $log)"
  nohup nice -n 10 bash -c "$(declare -f build); build" >"$log" 2>&1 </dev/null &
else
  echo "==> Kubernetes, Pulumi (go build) and the images (mmdebstrap + umoci), cached"
  build
fi
