#!/usr/bin/env bash
# The one prepared GPU run of the CUDA backend: configures with CUDA for sm_90a (Hopper: H100, H200),
# builds the CUDA test suite, the NCCL test (NcclCommunicator at world size 1, no MPI needed) and the
# CUDA benchmark, runs them, and writes a summary and the raw output under $OUT (default:
# <build>/device-check). It finishes within 8 minutes whatever happens: every step's timeout is capped
# by one global deadline (DSV32_DEVICE_BUDGET seconds after the start, default 465), keeping a reserve
# for the steps after it; a step cut short is reported "timed out". Never yet run on a device: how
# long each step takes there is an estimate (docs/cuda.md).
#
# NCCL: taken from the CUDA toolkit (CUDA 13 ships nccl.h and libnccl); where the toolkit lacks it, from
# the python3 wheel nvidia-nccl-cu13 if installed (NCCL_ROOT = the wheel's nvidia/nccl folder; too big
# to carry: libnccl is ~200 MB). Without either the NCCL test is reported "not built" and the rest runs.
#
#   scripts/device-check.sh [DEPS_DIR]
#
# DEPS_DIR holds the header-only dependencies (Eigen, nlohmann/json, doctest) unpacked under DEPS_DIR/usr,
# as scripts/prepare-device-deps.sh makes them (default: .device-deps); on a machine that has them
# installed pass an empty folder or nothing. The tokenizer component is off (PCRE2 is a compiled
# library that such a machine may lack). Environment: OUT, DSV32_DEVICE_BUILD (the build folder,
# default build-device), DSV32_CUDA_ARCH (default 90a), DSV32_BENCH_REPS (default 10),
# DSV32_DEVICE_BUDGET (default 465 s: the whole script's deadline, under the 8 minutes asked).
# Exit status: 0 when the tests passed, 1 otherwise (the summary says which step failed).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
deps="${1:-$root/.device-deps}"
build="${DSV32_DEVICE_BUILD:-$root/build-device}"
out="${OUT:-$build/device-check}"
arch="${DSV32_CUDA_ARCH:-90a}"
reps="${DSV32_BENCH_REPS:-10}"
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
start=$(date +%s)
deadline=$(( start + ${DSV32_DEVICE_BUDGET:-465} ))
note() { echo "$*" | tee -a "$summary"; }
elapsed() { echo "$(( $(date +%s) - start ))s"; }
# step_timeout CAP RESERVE: CAP seconds, or less so that RESERVE seconds stay for the later steps
# before the deadline (at least 1)
step_timeout() {
  local t=$(( deadline - $(date +%s) - $2 ))
  [ "$t" -gt "$1" ] && t=$1
  [ "$t" -lt 1 ] && t=1
  echo "$t"
}
# outcome RC: "timed out" for timeout's 124, else "exit RC"
outcome() { [ "$1" -eq 124 ] && echo "timed out" || echo "exit $1"; }

note "dsv32 device check: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown) $(date -u +%FT%TZ)"
(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 || echo "nvidia-smi failed") |
  tee "$out/nvidia-smi.txt" | sed 's/^/  /' | tee -a "$summary"
(nvcc --version 2>&1 | tail -1) | sed 's/^/  nvcc: /' | tee -a "$summary"

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
prefix=()
[ -d "$deps/usr" ] && prefix=(-DCMAKE_PREFIX_PATH="$deps/usr")
nccl=()
if [ -z "${NCCL_ROOT:-}" ] && ! ls /usr/local/cuda/include/nccl.h >/dev/null 2>&1; then
  wheel="$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)"
  [ -n "$wheel" ] && [ -f "$wheel/include/nccl.h" ] && nccl=(-DNCCL_ROOT="$wheel")
fi
if ! timeout "$(step_timeout 60 360)" cmake -S "$root" -B "$build" "${generator[@]}" "${prefix[@]}" "${nccl[@]}" -DCMAKE_BUILD_TYPE=Release -DDSV32_CUDA=ON \
     -DCMAKE_CUDA_ARCHITECTURES="$arch" -DDSV32_BUILD_TOKENIZER=OFF -DDSV32_INSTALL=OFF \
     >"$out/configure.txt" 2>&1; then
  note "configure: FAILED ($(elapsed)); see configure.txt"
  tail -30 "$out/configure.txt"
  exit 1
fi
note "configure: ok ($(elapsed))"
targets=(dsv32_cuda_tests dsv32-bench-cuda)
if grep -q "the dsv32::nccl component is built" "$out/configure.txt"; then
  targets+=(dsv32_nccl_tests)
  note "  $(grep -o "NCCL [0-9.]*: the dsv32::nccl component is built.*" "$out/configure.txt")"
else
  note "  NCCL: not found; the NCCL test is not built"
fi

jobs="$(nproc 2>/dev/null || echo 8)"
# the build keeps 150 s for the tests (90), the NCCL test (20) and the benchmark (40)
timeout "$(step_timeout 300 150)" cmake --build "$build" -j"$jobs" --target "${targets[@]}" >"$out/build.txt" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
  note "build: FAILED, $(outcome $rc) ($(elapsed)); see build.txt"
  grep -E "error|Error" "$out/build.txt" | head -40 | tee -a "$summary"
  exit 1
fi
note "build: ok ($(elapsed))"

status=0
timeout "$(step_timeout 200 60)" "$build/tests/dsv32_cuda_tests" --duration=true >"$out/tests.txt" 2>&1
rc=$?
if [ $rc -eq 0 ] && ! grep -q "SKIPPED: no CUDA device" "$out/tests.txt"; then
  note "tests: passed ($(elapsed))"
else
  [ $rc -eq 0 ] && note "tests: SKIPPED, no CUDA device ($(elapsed))" || note "tests: FAILED, $(outcome $rc) ($(elapsed))"
  status=1
fi
grep -E "^\[doctest\] (test cases|assertions)|worst logits|heuristics cached|fell back|another order|FP8 probe|grouped experts" "$out/tests.txt" | sed 's/^/  /' | tee -a "$summary"
grep -B3 -A12 "ERROR:" "$out/tests.txt" | head -120 >>"$summary"

if [[ " ${targets[*]} " == *" dsv32_nccl_tests "* ]]; then
  timeout "$(step_timeout 60 40)" "$build/tests/dsv32_nccl_tests" --duration=true >"$out/nccl.txt" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && ! grep -q "SKIPPED: no CUDA device" "$out/nccl.txt"; then
    note "nccl tests (W = 1): passed ($(elapsed))"
  else
    [ $rc -eq 0 ] && note "nccl tests: SKIPPED, no CUDA device ($(elapsed))" || note "nccl tests: FAILED, $(outcome $rc) ($(elapsed))"
    status=1
  fi
  grep -E "^\[doctest\] (test cases|assertions)" "$out/nccl.txt" | sed 's/^/  /' | tee -a "$summary"
  grep -B3 -A12 "ERROR:" "$out/nccl.txt" | head -60 >>"$summary"
else
  note "nccl tests: not built"
fi

timeout "$(step_timeout 150 5)" "$build/bench/dsv32-bench-cuda" "$reps" >"$out/bench.txt" 2>&1
note "bench: $(outcome $?) ($(elapsed))"
sed 's/^/  /' "$out/bench.txt" >>"$summary"
note "total: $(elapsed)"
exit $status
