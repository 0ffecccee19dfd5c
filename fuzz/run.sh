#!/usr/bin/env bash
# Runs dsv32's libFuzzer targets, each for N seconds, and prints executions and coverage per target.
#
#   fuzz/run.sh [--seconds N] [--parallel P] [--build-dir DIR] [--work-dir DIR] [--no-build] [--no-seeds] [TARGET...]
#
#   --seconds N     how long each target runs (default 60)
#   --parallel P    targets run at once (default 1)
#   --build-dir DIR the sanitizer build holding fuzz/ (default build/sanitize; configured and built by
#                   scripts/sanitizer-build.sh unless --no-build)
#   --work-dir DIR  where corpora, crash artifacts and logs go (default DIR/fuzz/work): the corpus of
#                   each target grows from run to run
#   --no-seeds      do not rewrite the seed corpora (DIR/fuzz/seeds) from tests/data
#   TARGET          safetensors config hf_index token_ids tokenizer_files encode decode chat chat_output
#                   dsml_output chat_v3_2 (default: all)
#
# Each target reads its growing corpus, its seeds and fuzz/regressions/TARGET (inputs that once
# failed), with the dictionary fuzz/dict/TARGET.dict. Fuzzers run under `nice -n 19` (DSV32_FUZZ_NICE);
# DSV32_FUZZ_ARGS adds libFuzzer flags (e.g. "-max_len=8192" to keep inputs small).
# Exit status: 0 when no target found anything; 1 otherwise (the crashing inputs are in
# WORK/artifacts/, named TARGET-crash-..., with libFuzzer's report in WORK/logs/TARGET.log).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds=60 parallel=1 build="$root/build/sanitize" work="" do_build=1 do_seeds=1 targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --parallel) parallel="$2"; shift 2 ;;
    --build-dir) build="$2"; shift 2 ;;
    --work-dir) work="$2"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --no-seeds) do_seeds=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz/run.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ -n "$work" ] || work="$build/fuzz/work"
all=(safetensors config hf_index token_ids tokenizer_files encode decode chat chat_output dsml_output chat_v3_2)
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
for t in "${targets[@]}"; do
  case " ${all[*]} " in *" $t "*) ;; *) echo "fuzz/run.sh: unknown target '$t' (targets: ${all[*]})" >&2; exit 2 ;; esac
done

if [ "$do_build" = 1 ]; then
  "$root/scripts/sanitizer-build.sh" "$build" dsv32_fuzz_make_seeds "${targets[@]/#/dsv32_fuzz_}"
fi
if [ "$do_seeds" = 1 ]; then
  "$build/fuzz/dsv32_fuzz_make_seeds" "$build/fuzz/seeds" >/dev/null
fi
mkdir -p "$work/logs" "$work/artifacts"

run_one() {
  local t="$1" exe="$build/fuzz/dsv32_fuzz_$1"
  [ -x "$exe" ] || { echo "fuzz/run.sh: $exe is not built" >&2; return 2; }
  [ -d "$build/fuzz/seeds/$t" ] || { echo "fuzz/run.sh: no seeds in $build/fuzz/seeds/$t (run without --no-seeds)" >&2; return 2; }
  mkdir -p "$work/corpus/$t"
  local dirs=("$work/corpus/$t" "$build/fuzz/seeds/$t")
  [ -n "$(ls -A "$root/fuzz/regressions/$t" 2>/dev/null)" ] && dirs+=("$root/fuzz/regressions/$t")
  # -timeout: one input may take at most 60 s (a loaded machine, ASan); -rss_limit_mb: ASan's shadow memory included.
  nice -n "${DSV32_FUZZ_NICE:-19}" "$exe" -max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 \
    -dict="$root/fuzz/dict/$t.dict" -artifact_prefix="$work/artifacts/$t-" -print_final_stats=1 \
    ${DSV32_FUZZ_ARGS:-} "${dirs[@]}" >"$work/logs/$t.log" 2>&1
}

status=0
pids=() names=()
for t in "${targets[@]}"; do
  run_one "$t" & pids+=($!); names+=("$t")
  if [ ${#pids[@]} -ge "$parallel" ]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done

printf '%-16s %8s %12s %8s %8s %8s  %s\n' target seconds executions cov ft corpus result
for t in "${targets[@]}"; do
  log="$work/logs/$t.log"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  line=$(grep -E '^#[0-9]+' "$log" | grep 'cov:' | tail -n 1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$line")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$line")
  corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$line")
  secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n 1)
  if grep -qE '^==[0-9]+==ERROR|^SUMMARY: |deadly signal|FUZZ_CHECK failed|Test unit written' "$log"; then
    result="FAILED (see $log)"; status=1
  elif [ -z "$secs" ]; then
    result="did not finish (see $log)"; status=1
  else
    result=ok
  fi
  printf '%-16s %8s %12s %8s %8s %8s  %s\n' "$t" "${secs:--}" "${execs:--}" "${cov:--}" "${ft:--}" "${corp:--}" "$result"
done
exit $status
