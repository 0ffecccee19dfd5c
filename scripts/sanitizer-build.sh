#!/usr/bin/env bash
# Configures and builds dsv32's sanitizer build: clang, every test suite and tool with
# -fsanitize=address,undefined -fno-sanitize-recover=all, the libFuzzer targets of fuzz/, and the
# concurrency tests once more under ThreadSanitizer.
#
#   scripts/sanitizer-build.sh BUILD_DIR [TARGET...]     (default: all targets)
#
# Run its tests with `ctest --test-dir BUILD_DIR`. The test command of README.md (.ci/run) does
# all of this through the ctest test dsv32_sanitizer_build and the tests after it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
[ $# -ge 1 ] || { echo "usage: scripts/sanitizer-build.sh BUILD_DIR [TARGET...]" >&2; exit 2; }
build="$1"; shift
cxx="${DSV32_SANITIZER_CXX:-clang++-14}"  # the clang of scripts/setup.sh
command -v "$cxx" >/dev/null || { echo "sanitizer-build: $cxx not found (scripts/setup.sh installs it)" >&2; exit 1; }
# -O1 -gline-tables-only: sanitizer reports with file:line stacks, tests fast enough (Eigen at -O0
# is not), 7% less compile time than -g. OpenMP stays on (clang's libomp): the ASan/UBSan suites
# then run the parallel paths; the ThreadSanitizer test links without it (tests/concurrency/tsan).
nice -n "${DSV32_BUILD_NICE:-0}" cmake -S "$root" -B "$build" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -gline-tables-only" -DDSV32_SANITIZE=address,undefined -DDSV32_BUILD_FUZZERS=ON \
  -DDSV32_TSAN_TESTS=ON -DDSV32_BUILD_BENCHMARKS=OFF -DDSV32_CUDA=OFF -DDSV32_INSTALL=OFF >/dev/null
args=()
for t in "$@"; do args+=(--target "$t"); done
nice -n "${DSV32_BUILD_NICE:-0}" cmake --build "$build" -j"${DSV32_BUILD_JOBS:-2}" "${args[@]}"
