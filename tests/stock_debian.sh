#!/usr/bin/env bash
# shellcheck disable=SC2016,SC2317  # (single-quoted scripts run in the root; cleanup runs on EXIT)
# The README's first command on a stock Debian: a fresh minimal root file system built from
# Debian's packages (mmdebstrap, variant minbase, plus python3 as the README assumes), this
# checkout copied into it, and `./dev up` run inside it as root until the platform shows
# "all flowing"; then `./dev down --purge`. Nothing from this machine's Python, JDK or caches
# is visible inside: every package, wheel and jar is downloaded afresh.
#
#   tests/stock_debian.sh [bookworm|trixie]      (as root; prints the time each step took)
#
# Two steps, so that the platform never meets this machine's own ports: `.ci/install up` (the
# install half of `./dev up`) runs with the machine's network to download, then `./dev up`
# itself runs in a network namespace of its own (its install half finds everything in place;
# its platform listens on that namespace's 127.0.0.1). Its mounts live in a private mount
# namespace and end with it; the root directory is removed.
set -euo pipefail
suite="${1:-bookworm}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
[ "$(id -u)" -eq 0 ] || { echo "run as root (mmdebstrap and chroot)" >&2; exit 64; }
command -v mmdebstrap >/dev/null || { echo "needs mmdebstrap: apt-get install mmdebstrap" >&2; exit 64; }

root="$(mktemp -d /var/tmp/hanzo-stock-debian.XXXXXX)"
leftovers() {  # processes whose root directory is inside the Debian root
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && echo "${p#/proc/}"
  done
  return 0
}
cleanup() {
  local pids
  pids="$(leftovers)"
  [ -z "$pids" ] || echo "$pids" | xargs kill -9 2>/dev/null || true
  sleep 1
  rm -rf --one-file-system "$root"
}
trap cleanup EXIT

t0=$SECONDS
step() { echo "==> [$((SECONDS - t0)) s] $*"; }

step "mmdebstrap $suite (minbase + python3) into $root"
mmdebstrap --quiet --variant=minbase --include=python3,ca-certificates \
  "$suite" "$root" http://deb.debian.org/debian
# This machine's network, as any machine on it has it: its resolver, and the CAs its egress
# proxy signs with (pip and Maven go through it) with pip told to use the system's trust store.
cp /etc/resolv.conf "$root/etc/resolv.conf"
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  chroot "$root" update-ca-certificates >/dev/null
fi
[ ! -e /etc/pip.conf ] || cp /etc/pip.conf "$root/etc/pip.conf"
# The host name resolves locally, as Debian's installer writes /etc/hosts (mmdebstrap writes
# none; Spark's driver looks its own host name up).
printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
  "$(hostname)" > "$root/etc/hosts"
mkdir -p "$root/root/hanzo-stream"
git -C "$repo" ls-files -z --cached --others --exclude-standard \
  | (cd "$repo" && xargs -0 tar -cf - --no-recursion) | tar -xf - -C "$root/root/hanzo-stream"
step "$(chroot "$root" sh -c '. /etc/os-release; echo "$PRETTY_NAME, $(python3 --version)"'), \
no pip: $(chroot "$root" python3 -m pip --version >/dev/null 2>&1 && echo no || echo yes)"

inside() {  # NET COMMAND: run a shell command in the root, in a private mount namespace with
  # /proc, /dev, /sys and a fresh /tmp; NET=own adds a network namespace with only loopback
  local unshare=(unshare --mount --propagation private)
  [ "$1" = own ] && unshare+=(--net)
  "${unshare[@]}" /bin/bash -c '
    set -e; r=$1; shift
    ip link set lo up 2>/dev/null || true
    mount -t proc proc "$r/proc"; mount --rbind /sys "$r/sys"; mount --rbind /dev "$r/dev"
    mount -t tmpfs -o mode=1777 tmpfs "$r/tmp"
    exec chroot "$r" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -c "$1"
  ' inside "$root" "$2"
}

step ".ci/install up (the install half of ./dev up: Debian packages, the venv, pip, Maven)"
inside host 'cd /root/hanzo-stream && .ci/install up 2>&1 | tee /root/install.log; exit ${PIPESTATUS[0]}'
step "./dev up, in a network namespace of its own"
status=0
inside own 'cd /root/hanzo-stream && ./dev up 2>&1 | tee /root/dev-up.log; exit ${PIPESTATUS[0]}' || status=$?
grep -q "all flowing" "$root/root/dev-up.log" || [ "$status" -ne 0 ] || status=1
step "./dev up exited $status"
if [ "$status" -ne 0 ]; then  # what the platform's own logs say, before the root goes
  for f in "$root"/root/hanzo-stream/.hanzo-stream/jobs/*/job.log; do
    [ -e "$f" ] && { echo "--- ${f#"$root"} (head)"; head -20 "$f"; }
  done
fi
inside own 'cd /root/hanzo-stream && ./dev down --purge' || true
step "done: ./dev up on a fresh Debian $suite $([ "$status" -eq 0 ] && echo "reached all flowing" || echo FAILED)"
exit "$status"
