#!/usr/bin/env bash
# The Debian packages the test suite runs for real (sshd, Prometheus, Alertmanager, Chromium,
# systemd-analyze, logrotate, tcsh as a login shell, libfaketime for a stepped clock,
# BusyBox's grep on a node):
# installed when missing, never skipped.  Used by `make test` (and so by .ci/run).
set -euo pipefail
packages=(openssh-server openssh-client prometheus prometheus-alertmanager chromium systemd logrotate tcsh faketime busybox)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
((${#missing[@]})) || exit 0
if ! command -v apt-get >/dev/null; then
  echo "make test needs these Debian packages: ${missing[*]}" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install as root: apt-get install ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "installing Debian packages the tests need: ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
