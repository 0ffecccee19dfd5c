#!/usr/bin/env bash
# Exercises dsv32-tokenize: encode, decode, chat (DeepSeek-V3's and DeepSeek-V3.2-Exp's templates,
# DeepSeek-V3.2's encoding), parse (DeepSeek-V3.2's and V3.2-Exp's replies), a conversation with
# tool calls round-tripped through text and ids, the chat format from the files, the defaults and
# error cases.
# Expected texts and ids are those of the case files (tests/data/tokenizer/*/chat_cases.json).
# usage: tool_test.sh PATH/TO/dsv32-tokenize DEEPSEEK_V3_DIR DEEPSEEK_V3_2_EXP_DIR
set -u
tool=$1
dir=$2
dir32=$3
failures=0
passes=0
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

check() {  # check NAME EXPECTED ACTUAL
  if [[ "$2" == "$3" ]]; then
    passes=$((passes + 1))
  else
    failures=$((failures + 1))
    printf 'FAIL %s\n  expected: %q\n  actual:   %q\n' "$1" "$2" "$3"
  fi
}

check_run() {  # check_run NAME EXPECTED_STDOUT STDIN COMMAND...: exit status 0 and exactly that output
  local name=$1 expected=$2 input=$3
  shift 3
  printf '%s' "$input" >"$scratch/in"
  "$@" <"$scratch/in" >"$scratch/out" 2>"$scratch/err"
  local status=$?
  local out
  out=$(cat "$scratch/out"; printf x)
  out=${out%x}
  if [[ $status -eq 0 && "$out" == "$expected" ]]; then
    passes=$((passes + 1))
  else
    failures=$((failures + 1))
    printf 'FAIL %s: status %d, stderr: %s\n  expected: %q\n  actual:   %q\n' "$name" "$status" "$(cat "$scratch/err")" \
      "$expected" "$out"
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
check_fails "unknown argument" "unknown argument '--frobnicate'" "$tool" --tokenizer "$dir" --frobnicate
check_fails "missing value" "--tokenizer: needs a value" "$tool" --tokenizer
check_fails "missing dir" "no such file" "$tool" --tokenizer "$dir/does-not-exist" --text x
check_fails "decode bad json" "input is not valid JSON" "$tool" --tokenizer "$dir" --decode --text '[1, 2'
check_fails "decode not ids" "element 1 of the id array is not a 32-bit integer" "$tool" --tokenizer "$dir" --decode --text '[1, "x"]'
check_fails "decode unknown id" "token id 999999 at position 0 is outside the tokenizer's vocabulary [0, 128815)" "$tool" --tokenizer "$dir" --decode --text '[999999]'
check_fails "encode invalid utf8" "not valid UTF-8" "$tool" --tokenizer "$dir" --text $'ab\xff'
check_fails "chat tool role" "role \"tool\" (tool outputs) is not supported with DeepSeek-V3's chat template" \
  "$tool" --tokenizer "$dir" --chat --text '{"messages": [{"role": "user", "content": "1"}, {"role": "tool", "content": "1"}]}'
check_fails "chat thinking v3" "DeepSeek-V3's chat template has none" \
  "$tool" --tokenizer "$dir" --chat --text '{"messages": [], "thinking": true}'
check_fails "chat not object" "expected a JSON object" "$tool" --tokenizer "$dir" --chat --text '[1]'
# a number past double's range (fuzz smoke finding, fuzz/regressions/chat/): an error, not a crash
check_fails "chat number overflow" "input is not valid JSON" \
  "$tool" --tokenizer "$dir" --chat --text '{"messages": [], "x": 1'"$(printf '1%.0s' $(seq 400))"'}'
check_fails "chat bad flag" "\"add_generation_prompt\" must be true or false" "$tool" --tokenizer "$dir" --chat --text '{"messages": [], "add_generation_prompt": "yes"}'
check_fails "option mismatch" "--ids applies to --chat and --parse only" "$tool" --tokenizer "$dir" --ids --text x

# ---- DeepSeek-V3.2-Exp (the default tokenizer)
check_run "default tokenizer" $'[128798,201,5718,678,3986,603,128799,271,671,3287,344,223,3180,16]\n' \
  $'<think>\nLet me reason.\n</think>\n\nThe answer is 42.' "$tool"
check_run "v3.2 thinking prompt" $'<｜begin▁of▁sentence｜><｜User｜>line1\nline2<｜Assistant｜><think>' \
  '{"messages": [{"role": "user", "content": "line1\nline2"}], "add_generation_prompt": true, "thinking": true}' \
  "$tool" --tokenizer "$dir32" --chat
check_run "v3.2 non-thinking prompt" '<｜begin▁of▁sentence｜>系统提示<｜User｜>Hello!<｜Assistant｜></think>' \
  '{"messages": [{"role": "system", "content": "系统提示"}, {"role": "user", "content": "Hello!"}], "add_generation_prompt": true}' \
  "$tool" --chat

# A conversation with two tool calls, their outputs and later turns (chat_cases.json case 9):
# rendered -> the same text; its ids -> the case's ids; those ids decoded -> the same text again.
tool_chat='{"messages": [{"role": "user", "content": "写一首关于春天的诗。"}, {"role": "assistant", "content": "Checking.", "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": "{\"query\": \"DeepSeek V3.2\", \"top_k\": 3}"}}, {"type": "function", "function": {"name": "calc", "arguments": "{\"expr\": \"2+2\"}"}}]}, {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "assistant", "content": "Translate '"'"'chat'"'"' to French."}, {"role": "user", "content": "Explain MLA in one sentence."}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Translate '"'"'chat'"'"' to French."}], "add_generation_prompt": true, "thinking": false}'
tool_text='<｜begin▁of▁sentence｜><｜User｜>写一首关于春天的诗。<｜Assistant｜></think>Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{"query": "DeepSeek V3.2", "top_k": 3}<｜tool▁call▁end｜><｜tool▁call▁begin｜>calc<｜tool▁sep｜>{"expr": "2+2"}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁output▁begin｜>{"temp": 21}<｜tool▁output▁end｜><｜tool▁output▁begin｜>{"temp": 21}<｜tool▁output▁end｜>Translate '"'"'chat'"'"' to French.<｜end▁of▁sentence｜><｜User｜>Explain MLA in one sentence.<｜Assistant｜></think>Hello!<｜end▁of▁sentence｜><｜User｜>Translate '"'"'chat'"'"' to French.<｜Assistant｜></think>'
tool_ids='[0,128803,2935,46097,5149,79309,4967,320,128804,128799,123452,16,128806,128808,14346,128814,24313,12066,3362,582,53091,4374,1465,721,21,16,20,1760,582,16126,24224,3362,223,21,95,128809,128808,70360,128814,24313,35803,3362,582,20,13,20,62773,128809,128807,1,128812,24313,26343,3362,223,1602,95,128813,128812,24313,26343,3362,223,1602,95,128813,97520,905,35038,9,304,7213,16,1,128803,65106,82101,295,834,10175,16,128804,128799,19923,3,1,128803,97520,905,35038,9,304,7213,16,128804,128799]'
check_run "tool calls: render" "$tool_text" "$tool_chat" "$tool" --tokenizer "$dir32" --chat
check_run "tool calls: ids" "$tool_ids"$'\n' "$tool_chat" "$tool" --tokenizer "$dir32" --chat --ids
"$tool" --tokenizer "$dir32" --chat --ids <<<"$tool_chat" >"$scratch/ids"
check_run "tool calls: decode the rendered ids" "$tool_text" "$(cat "$scratch/ids")" "$tool" --tokenizer "$dir32" --decode
check_run "tool calls: encode the decoded text" "$tool_ids"$'\n' "$tool_text" "$tool" --tokenizer "$dir32"

# malformed conversations
chat_fails() {  # chat_fails NAME EXPECTED_STDERR_FRAGMENT MESSAGES_JSON
  check_fails "$1" "$2" "$tool" --tokenizer "$dir32" --chat --text "{\"messages\": $3}"
}
chat_fails "unknown role" 'chat message 1: unknown role "developer"' \
  '[{"role": "user", "content": "x"}, {"role": "developer", "content": "y"}]'
chat_fails "missing content" 'chat message 0 (role "user"): missing "content"' '[{"role": "user"}]'
chat_fails "null content" '"content" is null; only an assistant message with tool_calls may have null content' \
  '[{"role": "user", "content": "x"}, {"role": "assistant", "content": null}]'
chat_fails "arguments not a string" 'chat message 1: tool_calls[0].function.arguments: expected a string' \
  '[{"role": "user", "content": "x"}, {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}]'
chat_fails "tool without a call" 'chat message 2: a tool message must follow an assistant message with tool_calls' \
  '[{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}, {"role": "tool", "content": "z"}]'
chat_fails "prefix not boolean" '"prefix" must be true or false' \
  '[{"role": "user", "content": "x"}, {"role": "assistant", "content": "y", "prefix": 1}]'
check_fails "thinking not boolean" '"thinking" must be true or false, found "yes"' \
  "$tool" --tokenizer "$dir32" --chat --text '{"messages": [], "thinking": "yes"}'
check_fails "unknown field" 'unknown field "tools"' \
  "$tool" --tokenizer "$dir32" --chat --text '{"messages": [], "tools": []}'

# ---- DeepSeek-V3.2 (its encoding module, DSML tool calls): case 22 of
# tests/data/tokenizer/deepseek_v3_2/encode_cases.json, case 7 of parse_cases.json (the rules
# themselves are tested in test_deepseek_v3_2.cpp; here, the tool's plumbing).
heredoc() { IFS= read -r -d '' "$1" || true; printf -v "$1" '%s' "${!1%$'\n'}"; }
heredoc v32_chat <<'END'
{"messages": [{"role": "user", "content": "  leading and trailing spaces  "}, {"role": "assistant", "content": "It is 12 °C and cloudy in Berlin.", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"line1\\nline2\", \"unit\": \"celsius\", \"days\": 2}"}}]}], "thinking_mode": "thinking"}
END
heredoc v32_text <<'END'
<｜begin▁of▁sentence｜><｜User｜>  leading and trailing spaces  <｜Assistant｜><think></think>It is 12 °C and cloudy in Berlin.

<｜DSML｜function_calls>
<｜DSML｜invoke name="get_weather">
<｜DSML｜parameter name="city" string="true">line1
line2</｜DSML｜parameter>
<｜DSML｜parameter name="unit" string="true">celsius</｜DSML｜parameter>
<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>
</｜DSML｜invoke>
</｜DSML｜function_calls><｜end▁of▁sentence｜>
END
v32_ids='[0,128803,223,6646,305,52964,13564,262,128804,128798,128799,2107,344,223,736,8490,37,305,57534,295,17575,339,30,28217,10525,7398,28217,8701,4941,12548,1018,30,28217,10525,7398,28217,40148,5406,2329,1281,1133,65,50219,3816,30,28217,10525,7398,28217,41523,2329,1281,37399,4,3418,1281,11476,3320,1836,19,201,1836,20,1718,28217,10525,7398,28217,41523,1018,30,28217,10525,7398,28217,41523,2329,1281,15165,4,3418,1281,11476,3320,69,33030,1718,28217,10525,7398,28217,41523,1018,30,28217,10525,7398,28217,41523,2329,1281,28026,4,3418,1281,19836,3320,20,1718,28217,10525,7398,28217,41523,1018,1718,28217,10525,7398,28217,40148,5406,1018,1718,28217,10525,7398,28217,8701,4941,12548,32,1]'
check_run "v3.2 chat: render" "$v32_text" "$v32_chat" "$tool" --tokenizer "$dir32" --chat-format deepseek-v3.2 --chat
check_run "v3.2 chat: ids" "$v32_ids"$'\n' "$v32_chat" "$tool" --tokenizer "$dir32" --chat-format deepseek-v3.2 --chat --ids
heredoc v32_completion <<'END'
Let me think step by step.
17 * 20 = 340, 17 * 3 = 51.</think>

<｜DSML｜function_calls>
<｜DSML｜invoke name="calculator">
<｜DSML｜parameter name="expression" string="true">东京</｜DSML｜parameter>
</｜DSML｜invoke>
</｜DSML｜function_calls><｜end▁of▁sentence｜>
END
heredoc v32_message <<'END'
{"role": "assistant", "content": "", "reasoning_content": "Let me think step by step.\n17 * 20 = 340, 17 * 3 = 51.", "tool_calls": [{"type": "function", "function": {"name": "calculator", "arguments": "{\"expression\": \"东京\"}"}}]}
END
check_run "v3.2 parse" "$v32_message"$'\n' "$v32_completion" "$tool" --tokenizer "$dir32" --chat-format deepseek-v3.2 --parse --thinking-mode thinking
"$tool" --tokenizer "$dir32" --text "$v32_completion" >"$scratch/completion_ids"
check_run "v3.2 parse: ids" "$v32_message"$'\n' "$(cat "$scratch/completion_ids")" "$tool" --tokenizer "$dir32" --chat-format deepseek-v3.2 --parse --thinking-mode thinking --ids
# The format from the files: DeepSeek-V3.2's directory has an encoding/ folder (and no template).
mkdir -p "$scratch/v3_2/encoding"
ln -s "$(cd "$dir32" && pwd)/tokenizer.json" "$scratch/v3_2/tokenizer.json"
ln -s "$(cd "$dir32" && pwd)/tokenizer_config.json" "$scratch/v3_2/tokenizer_config.json"
check_run "v3.2 chat: the format from the files" "$v32_text" "$v32_chat" "$tool" --tokenizer "$scratch/v3_2" --chat
# ... and another format named explicitly.
check_run "v3.2-exp dir, --chat-format deepseek-v3" '<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>' \
  '{"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true}' \
  "$tool" --tokenizer "$dir32" --chat-format deepseek-v3 --chat
check_run "v3.2-exp parse" '{"role": "assistant", "content": "Checking.", "reasoning_content": "R", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}'$'\n' \
  'R</think>Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>' \
  "$tool" --tokenizer "$dir32" --parse --thinking-mode thinking
# Refused conversations and malformed completions: exit status 1, the error on standard error.
v32_fails() {  # v32_fails NAME EXPECTED_STDERR_FRAGMENT INPUT ARGS...
  local name=$1 fragment=$2 input=$3
  shift 3
  printf '%s' "$input" >"$scratch/in"
  check_fails "$name" "$fragment" "$tool" --tokenizer "$dir32" --chat-format deepseek-v3.2 "$@" <"$scratch/in"
}
v32_fails "v3.2 chat: tool without a call" 'message 1 (role "tool"): a tool message must follow an assistant message' \
  '{"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "y"}], "thinking_mode": "thinking"}' --chat
v32_fails "v3.2 chat: bad thinking_mode" '"thinking_mode" must be "chat" or "thinking", found true' \
  '{"messages": [], "thinking_mode": true}' --chat
v32_fails "v3.2 parse: no eos" 'DeepSeek-V3.2 completion: invalid summary format at byte 5' 'Hello' --parse
check_fails "unknown chat format" "--chat-format: expects deepseek-v3.2, deepseek-v3.2-exp or deepseek-v3, got 'deepseek-v4'" "$tool" --chat-format deepseek-v4 --chat
check_fails "thinking mode without parse" "--thinking-mode applies to --parse" "$tool" --thinking-mode thinking --chat
check_fails "chat and parse" "--decode, --chat and --parse exclude each other" "$tool" --chat --parse

if [[ -s "$bad_status" ]]; then
  failures=$((failures + $(wc -l <"$bad_status")))
  sed 's/^/FAIL /' "$bad_status"
fi
echo "$passes passed, $failures failed"
[[ $failures -eq 0 ]]
