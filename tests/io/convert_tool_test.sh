#!/usr/bin/env bash
# Exercises dsv32-convert: a conversion of a small sharded Hugging Face checkpoint, --help, and error
# cases (exit status and message on standard error).
# usage: convert_tool_test.sh PATH/TO/dsv32-convert PATH/TO/dsv32_make_hf_checkpoint GOLDEN_DIR WORK_DIR
set -u
tool=$1
make_hf=$2
golden=$3
work=$4
failures=0
passes=0

pass() { passes=$((passes + 1)); }
failed() { failures=$((failures + 1)); printf 'FAIL %s\n' "$*"; }

check_fails() {  # check_fails NAME EXPECTED_STATUS EXPECTED_STDERR_FRAGMENT COMMAND...
  local name=$1 want=$2 fragment=$3
  shift 3
  local err status
  err=$("$@" 2>&1 >/dev/null)
  status=$?
  if [[ $status -eq $want && "$err" == *"$fragment"* ]]; then pass; else failed "$name: status $status, stderr: $err"; fi
}

rm -rf "$work"
mkdir -p "$work"
"$make_hf" "$golden/tiny_bf16" "$work/hf" 3 || { echo "FAIL cannot write the test checkpoint"; exit 1; }

# A conversion: the shard, the reference-format config.json and the tokenizer file; progress on stderr.
err=$("$tool" --hf-ckpt-path "$work/hf" --save-path "$work/mp1" --model-parallel 1 --n-experts 8 2>&1 >/dev/null)
status=$?
if [[ $status -eq 0 ]]; then pass; else failed "conversion: status $status, stderr: $err"; fi
for f in model0-mp1.safetensors config.json tokenizer_config.json; do
  if [[ -f "$work/mp1/$f" ]]; then pass; else failed "conversion did not write $f"; fi
done
if [[ "$err" == *"model0-mp1.safetensors: "*" tensors, "*" done"* ]]; then pass; else failed "progress output: $err"; fi
if grep -q '"n_heads": 3' "$work/mp1/config.json"; then pass; else failed "config.json: $(cat "$work/mp1/config.json")"; fi

# --quiet prints nothing; --flag=value works.
err=$("$tool" --hf-ckpt-path="$work/hf" --save-path="$work/quiet" --model-parallel=1 --quiet 2>&1)
if [[ $? -eq 0 && -z "$err" && -f "$work/quiet/model0-mp1.safetensors" ]]; then pass; else failed "--quiet: $err"; fi

# --help
out=$("$tool" --help)
if [[ $? -eq 0 && "$out" == *"usage: dsv32-convert"* ]]; then pass; else failed "--help"; fi

# Errors: conversion failures exit 1, bad arguments 2; nothing written.
check_fails "missing directory" 1 "does not exist" "$tool" --hf-ckpt-path "$work/nothing" --save-path "$work/x" --model-parallel 1
check_fails "world size" 1 "n_heads (3) is not divisible by the world size 2" \
  "$tool" --hf-ckpt-path "$work/hf" --save-path "$work/mp2" --model-parallel 2
if [[ ! -e "$work/mp2" ]]; then pass; else failed "a refused conversion wrote $work/mp2"; fi
check_fails "n-experts" 1 "--n-experts is 16" "$tool" --hf-ckpt-path "$work/hf" --save-path "$work/x" --model-parallel 1 --n-experts 16
check_fails "same directory" 1 "is the input checkpoint directory" \
  "$tool" --hf-ckpt-path "$work/hf" --save-path "$work/hf" --model-parallel 1
check_fails "not a number" 2 "--model-parallel: expects an integer in [1, 1048576], got 'two'" \
  "$tool" --hf-ckpt-path "$work/hf" --save-path "$work/x" --model-parallel two
check_fails "zero" 2 "--model-parallel: expects an integer in [1, 1048576], got '0'" "$tool" --hf-ckpt-path "$work/hf" --save-path "$work/x" --model-parallel 0
check_fails "missing flag" 2 "--save-path is required" "$tool" --hf-ckpt-path "$work/hf" --model-parallel 1
check_fails "unknown flag" 2 "unknown argument '--fast'" "$tool" --fast
check_fails "unknown flag after others" 2 "unknown argument '--fast'" "$tool" --hf-ckpt-path "$work/hf" --fast
check_fails "stray argument" 2 "unknown argument 'extra'" "$tool" --hf-ckpt-path "$work/hf" --save-path "$work/x" --model-parallel 1 extra
check_fails "no value" 2 "--save-path: needs a value" "$tool" --hf-ckpt-path "$work/hf" --save-path

rm -rf "$work"
echo "dsv32-convert tool test: $passes passed, $failures failed"
[[ $failures -eq 0 ]]
