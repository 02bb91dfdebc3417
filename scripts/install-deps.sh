#!/usr/bin/env bash
# Installs the Debian packages hsi needs to build and test, when missing.
# Idempotent: does nothing (and needs no network) when all are present.
set -euo pipefail
PKGS=(build-essential pkg-config libopenblas-dev liblapacke-dev libcunit1-dev libgdal-dev
      libmatio-dev libxml2-dev zlib1g-dev libcjson-dev libcairo2-dev fonts-dejavu-core)
# the MPI build (make MPI=1, make test-mpi): Open MPI; the default build needs none
[ "${HSI_MPI:-0}" = 1 ] && PKGS+=(openmpi-bin libopenmpi-dev)
[ "${HSI_DEPS_EXTRA:-}" ] && PKGS+=(${HSI_DEPS_EXTRA})
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"
