#!/usr/bin/env bash
# Exercises dsv32-tokenize: encode, decode, chat, the environment default and error cases.
# usage: tool_test.sh PATH/TO/dsv32-tokenize TOKENIZER_DIR
set -u
tool=$1
dir=$2
failures=0
passes=0

check() {  # check NAME EXPECTED ACTUAL
  if [[ "$2" == "$3" ]]; then
    passes=$((passes + 1))
  else
    failures=$((failures + 1))
    printf 'FAIL %s\n  expected: %q\n  actual:   %q\n' "$1" "$2" "$3"
  fi
}

check_fails() {  # check_fails NAME EXPECTED_STDERR_FRAGMENT COMMAND... (stdin from the caller)
  # Exit status 2 for bad arguments (messages that point to --help), 1 for everything else.
  local name=$1 fragment=$2
  shift 2
  local err status want=1
  err=$("$@" 2>&1 >/dev/null)
  status=$?
  [[ "$err" == *"for usage"* ]] && want=2
  if [[ $status -eq $want && "$err" == *"$fragment"* ]]; then
    passes=$((passes + 1))
  else
    failures=$((failures + 1))
    printf 'FAIL %s: status %d (expected %d), stderr: %s\n' "$name" "$status" "$want" "$err"
  fi
}

# ok ARGS...: the tool, whose exit status must be 0 (a failure is recorded; the caller compares output).
bad_status=$(mktemp)
trap 'rm -f "$bad_status"' EXIT
ok() {
  "$tool" "$@"
  local s=$?
  [[ $s -eq 0 ]] || printf 'exit status %d: dsv32-tokenize %s\n' "$s" "$*" >>"$bad_status"
}

unset DSV32_TOKENIZER_DIR

# encode: from stdin and from --text
check "encode stdin" '[19923,14,2058,3]' "$(printf 'Hello, world!' | ok --tokenizer "$dir")"
check "encode --text" '[19923,14,2058,3]' "$(ok --tokenizer "$dir" --text 'Hello, world!')"
check "encode --add-special" '[0,19923,14,2058,3]' "$(ok --tokenizer "$dir" --add-special --text 'Hello, world!')"
check "encode special text" '[0,6366,128803,90]' \
  "$(ok --tokenizer "$dir" --text '<｜begin▁of▁sentence｜>hi<｜User｜>x')"
check "encode empty" '[]' "$(printf '' | ok --tokenizer "$dir")"

# decode
check "decode" 'Hello, world!' "$(ok --tokenizer "$dir" --decode --text '[19923,14,2058,3]')"
check "decode stdin" $'line1\nline2' "$(printf '%s' "$(ok --tokenizer "$dir" --text $'line1\nline2')" | ok --tokenizer "$dir" --decode)"
check "decode special" '<｜begin▁of▁sentence｜>Hello' "$(ok --tokenizer "$dir" --decode --text '[0, 19923]')"
check "decode --skip-special" 'Hello' "$(ok --tokenizer "$dir" --decode --skip-special --text '[0, 19923, 1]')"

# chat
chat='{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}], "add_generation_prompt": true}'
check "chat" '<｜begin▁of▁sentence｜>Be brief.<｜User｜>What is 2+2?<｜Assistant｜>' \
  "$(printf '%s' "$chat" | ok --tokenizer "$dir" --chat)"
check "chat --ids" '[0,7153,9708,16,128803,3085,344,223,20,13,20,33,128804]' \
  "$(printf '%s' "$chat" | ok --tokenizer "$dir" --chat --ids)"
check "chat no prompt" '<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜>' \
  "$(ok --tokenizer "$dir" --chat --text '{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]}')"

# the environment default
check "DSV32_TOKENIZER_DIR" '[19923]' "$(DSV32_TOKENIZER_DIR="$dir" ok --text Hello)"

# help
check "help" "0" "$(ok --help >/dev/null; echo $?)"
check "help text" "yes" "$(ok --help | grep -q -- '--tokenizer DIR' && echo yes)"

# errors: message on stderr, non-zero status
check_fails "no tokenizer" "pass --tokenizer DIR" "$tool" --text x
check_fails "unknown argument" "unknown argument '--frobnicate'" "$tool" --tokenizer "$dir" --frobnicate
check_fails "missing value" "--tokenizer needs a value" "$tool" --tokenizer
check_fails "missing dir" "cannot open" "$tool" --tokenizer "$dir/does-not-exist" --text x
check_fails "decode bad json" "input is not valid JSON" "$tool" --tokenizer "$dir" --decode --text '[1, 2'
check_fails "decode not ids" "element 1 of the id array is not a 32-bit integer" "$tool" --tokenizer "$dir" --decode --text '[1, "x"]'
check_fails "decode unknown id" "token id 999999 at position 0 is outside the tokenizer's vocabulary [0, 128815)" "$tool" --tokenizer "$dir" --decode --text '[999999]'
check_fails "encode invalid utf8" "not valid UTF-8" "$tool" --tokenizer "$dir" --text $'ab\xff'
check_fails "chat tool role" "role \"tool\"" "$tool" --tokenizer "$dir" --chat --text '{"messages": [{"role": "tool", "content": "1"}]}'
check_fails "chat not object" "expected a JSON object" "$tool" --tokenizer "$dir" --chat --text '[1]'
check_fails "chat bad flag" "\"add_generation_prompt\" must be true or false" "$tool" --tokenizer "$dir" --chat --text '{"messages": [], "add_generation_prompt": "yes"}'
check_fails "option mismatch" "--ids applies to --chat only" "$tool" --tokenizer "$dir" --ids --text x

if [[ -s "$bad_status" ]]; then
  failures=$((failures + $(wc -l <"$bad_status")))
  sed 's/^/FAIL /' "$bad_status"
fi
echo "$passes passed, $failures failed"
[[ $failures -eq 0 ]]
