#!/usr/bin/env bash
# Prepares the header-only dependencies the GPU machine lacks (it has nvcc, CMake, ninja and a compiler,
# but no package registry and none of our Debian headers): Eigen, nlohmann/json, doctest and CLI11 (the
# tools', examples' and benchmarks' argument parsing: configuring needs it), taken from this machine's
# Debian archive with `apt-get download` and unpacked with `dpkg -x` into DIR (default: .device-deps,
# git-ignored). scripts/device-check.sh points CMake at DIR/usr.
#
#   scripts/prepare-device-deps.sh [DIR]
#
# Then, e.g. with the device tool: run scripts/device-check.sh there, carrying .device-deps.
#
# NCCL (the dsv32::nccl component's test) is not carried: its library is ~200 MB, and the GPU machine
# has its own, in the CUDA toolkit or in the python3 wheel nvidia-nccl-cu13 (device-check.sh finds either).
# MPI is not needed there: the NCCL test runs at world size 1 without it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-$root/.device-deps}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download libeigen3-dev nlohmann-json3-dev doctest-dev libcli11-dev >/dev/null)
rm -rf "$dir"
mkdir -p "$dir"
for deb in "$work"/*.deb; do dpkg -x "$deb" "$dir"; done
# documentation and examples are not needed there (the folder travels with the working tree)
rm -rf "$dir/usr/share/doc" "$dir/usr/share/man"
echo "prepare-device-deps: $(du -sh "$dir" | cut -f1) in $dir:"
ls "$dir/usr/include"
