# Sourced by .ci/install-*.sh: apt_install_quietly PKG... installs Debian packages without
# letting their postinst scripts start system services (the platform runs its own containerd,
# etcd, Prometheus, Alertmanager with the project's config).
apt_install_quietly() {
  [ $# -gt 0 ] || return 0
  echo "==> apt-get install $*"
  local SUDO="" added_policy=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod 755 /usr/sbin/policy-rc.d
    added_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
  [ -z "$added_policy" ] || $SUDO rm -f /usr/sbin/policy-rc.d
}
