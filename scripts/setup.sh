#!/usr/bin/env bash
# Installs dsv32's build dependencies from Debian packages (skipped when they are already present).
set -euo pipefail
# clang-14, libclang-rt-14-dev, libomp-14-dev: the sanitizer build and the libFuzzer targets
# (scripts/sanitizer-build.sh; libomp is clang's OpenMP); libopenmpi-dev, openmpi-bin: the dsv32::mpi
# component, its tests (mpirun) and dsv32-bench-mpi
packages=(cmake g++ make libeigen3-dev nlohmann-json3-dev doctest-dev libpcre2-dev doxygen clang-14 libclang-rt-14-dev
          libomp-14-dev libopenmpi-dev openmpi-bin)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
