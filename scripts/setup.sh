#!/usr/bin/env bash
# Installs dsv32's build dependencies from Debian packages (skipped when they are already present).
set -euo pipefail
# clang-14, libclang-rt-14-dev, libomp-14-dev: the sanitizer build and the libFuzzer targets
# (scripts/sanitizer-build.sh; libomp is clang's OpenMP); libopenmpi-dev, openmpi-bin: the dsv32::mpi
# component, its tests (mpirun) and dsv32-bench-mpi; libcpp-httplib-dev, pkg-config: dsv32-server;
# libcli11-dev: the argument parsing of the tools, examples and benchmarks (tools/cli.hpp);
# python3-venv: the server tests' virtual environment (below)
packages=(cmake g++ make libeigen3-dev nlohmann-json3-dev doctest-dev libpcre2-dev doxygen clang-14 libclang-rt-14-dev
          libomp-14-dev libopenmpi-dev openmpi-bin libcpp-httplib-dev libcli11-dev pkg-config
          python3-venv)
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

# The server tests' Python packages (the official openai client, pinned in tests/server/requirements.txt)
# in a virtual environment at .venv, made once and refreshed when the requirements change.
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv"
requirements="$root/tests/server/requirements.txt"
if ! cmp -s "$requirements" "$venv/requirements.installed" 2>/dev/null; then
  echo "setup: installing the server tests' Python packages into $venv"
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$venv/requirements.installed"
fi
