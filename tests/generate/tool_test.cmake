# Tests of dsv32-generate, one CASE per ctest (see tests.cmake): runs the tool, checks its exit
# status and that its standard output / error match regular expressions.
# Variables: CASE, TOOL (dsv32-generate), DATA (tests/data), WORK_DIR (scratch), SCRIPT (util-linux's
# script, to run the tool on a pseudo-terminal; may be empty).
cmake_minimum_required(VERSION 3.20)

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# run(RC <status> ARGS <args...> [INPUT <stdin text>] [STDOUT <regex>...] [STDERR <regex>...]):
# runs the tool; its standard output is left in `out`.
function(run)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "RC;INPUT" "ARGS;STDOUT;STDERR")
  set(input_file "${WORK_DIR}/stdin.txt")
  file(WRITE "${input_file}" "${arg_INPUT}")
  execute_process(COMMAND "${TOOL}" ${arg_ARGS} INPUT_FILE "${input_file}" RESULT_VARIABLE rc
                  OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)
  set(show "dsv32-generate ${arg_ARGS}\n--- stdout:\n${stdout}\n--- stderr:\n${stderr}")
  if(NOT rc STREQUAL arg_RC)
    message(FATAL_ERROR "expected exit status ${arg_RC}, got ${rc}: ${show}")
  endif()
  foreach(regex IN LISTS arg_STDOUT)
    if(NOT stdout MATCHES "${regex}")
      message(FATAL_ERROR "standard output does not match '${regex}': ${show}")
    endif()
  endforeach()
  foreach(regex IN LISTS arg_STDERR)
    if(NOT stderr MATCHES "${regex}")
      message(FATAL_ERROR "standard error does not match '${regex}': ${show}")
    endif()
  endforeach()
  set(out "${stdout}" PARENT_SCOPE)
endfunction()

# manifest_row(<json> <key> <index> <begin> <end> <out>): elements [begin, end) of manifest[key][index],
# space-separated.
function(manifest_row json key index begin end out)
  set(items)
  math(EXPR last "${end} - 1")
  foreach(i RANGE ${begin} ${last})
    string(JSON v GET "${json}" ${key} ${index} ${i})
    list(APPEND items ${v})
  endforeach()
  list(JOIN items " " joined)
  set(${out} "${joined}" PARENT_SCOPE)
endfunction()

# continuation(<ids JSON array> <max new tokens> <out>): the text that greedy generation from these
# prompt ids produces, computed the long way — dsv32-generate on ids (eos 1, as the text modes
# take it from the tokenizer), then dsv32-tokenize --decode --skip-special — to check the text modes
# against (TOKENIZE: the dsv32-tokenize tool).
function(continuation ids_json max_new out_var)
  string(REGEX REPLACE "[][ ]" "" ids "${ids_json}")
  string(REPLACE "," " " ids "${ids}")
  run(RC 0 ARGS --prompt-ids "${ids}" --temperature 0 --max-new-tokens ${max_new} --eos-id 1 --quiet
      STDOUT "^([0-9]+( [0-9]+)*)?\n$")
  string(STRIP "${out}" generated)
  string(REPLACE " " "," generated "[${generated}]")
  execute_process(COMMAND "${TOKENIZE}" --tokenizer "${tokenizer}" --decode --skip-special --text "${generated}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE text ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "dsv32-tokenize --decode ${generated}: exit status ${rc}: ${err}")
  endif()
  set(${out_var} "${text}" PARENT_SCOPE)
endfunction()

# json_string(<text> <out>): `text` as a JSON string literal, quotes included.
function(json_string text out_var)
  string(REPLACE "\\" "\\\\" text "${text}")
  string(REPLACE "\"" "\\\"" text "${text}")
  string(REPLACE "\n" "\\n" text "${text}")
  string(REPLACE "\r" "\\r" text "${text}")
  string(REPLACE "\t" "\\t" text "${text}")
  set(${out_var} "\"${text}\"" PARENT_SCOPE)
endfunction()

# chat_ids(<messages JSON array> <out>): the prompt ids of a conversation (dsv32-tokenize --chat --ids).
function(chat_ids messages out_var)
  execute_process(COMMAND "${TOKENIZE}" --tokenizer "${tokenizer}" --chat --ids
                          --text "{\"messages\": ${messages}, \"add_generation_prompt\": true}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE ids ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "dsv32-tokenize --chat --ids: exit status ${rc}: ${err}")
  endif()
  set(${out_var} "${ids}" PARENT_SCOPE)
endfunction()

set(timing "time to first token [0-9.]+ ms; decode [0-9]+ tokens in [0-9.]+ ms = [0-9.]+ tokens/s")
set(golden "${DATA}/golden")
set(tokenizer "${DATA}/tokenizer/deepseek_v3_2_exp")  # the default one
set(tokenizer_v3 "${DATA}/tokenizer/deepseek_v3")

if(CASE STREQUAL "default_run")
  # the embedded tiny model on the built-in prompt: 100 ids on one line, the model and timing on stderr
  run(RC 0 ARGS --max-new-tokens 100 STDOUT "^[0-9]+( [0-9]+)*\n$" STDERR "model embedded-default" "${timing}")
  string(REGEX MATCHALL "[0-9]+" ids "${out}")
  list(LENGTH ids n)
  if(NOT n EQUAL 100)
    message(FATAL_ERROR "expected 100 token ids, got ${n}: ${out}")
  endif()
  run(RC 0 ARGS STDERR "${timing}")  # and with no argument at all
  run(RC 0 ARGS --help STDOUT "usage: dsv32-generate" "--prompt-ids" "--chat" "--top-p" "--batch-file")

elseif(CASE STREQUAL "golden_prompt_ids")
  # A golden scenario's shortest prompt alone, greedy: the reference's tokens (a longer prompt alone
  # would be prefilled at once rather than position by position, which rounds differently).
  foreach(scenario tiny_bf16 tiny_bf16_rope_interleaved tiny_fp8_ue8m0_yarn tiny_fp8_plain_scale)
    file(READ "${golden}/${scenario}/manifest.json" manifest)
    string(JSON max_new GET "${manifest}" max_new_tokens)
    string(JSON len0 LENGTH "${manifest}" prompts 0)
    string(JSON len1 LENGTH "${manifest}" prompts 1)
    set(b 0)
    if(len1 LESS len0)
      set(b 1)
      set(len0 ${len1})
    endif()
    manifest_row("${manifest}" prompts ${b} 0 ${len0} prompt)
    math(EXPR end "${len0} + ${max_new}")
    manifest_row("${manifest}" final_tokens ${b} ${len0} ${end} expected)
    run(RC 0 ARGS --checkpoint "${golden}/${scenario}" --prompt-ids "${prompt}" --temperature 0
                  --max-new-tokens ${max_new} STDOUT "^${expected}\n$" STDERR "model ${scenario}" "${timing}")
    if(scenario MATCHES "fp8")
      # the FP8 fast accumulation mode keeps these greedy tokens (its logits stay within 1e-4 of the
      # exact ones on these scenarios, with the same top-k sets: tests/golden)
      run(RC 0 ARGS --checkpoint "${golden}/${scenario}" --prompt-ids "${prompt}" --temperature 0 --fp8-fast
                    --max-new-tokens ${max_new} STDOUT "^${expected}\n$")
    endif()
  endforeach()
  # token ids from standard input
  file(READ "${golden}/tiny_bf16/manifest.json" manifest)
  manifest_row("${manifest}" prompts 0 0 7 prompt)
  manifest_row("${manifest}" final_tokens 0 7 13 expected)
  run(RC 0 ARGS --checkpoint "${golden}/tiny_bf16" --prompt-ids - --temperature 0 --max-new-tokens 6
      INPUT "${prompt}\n" STDOUT "^${expected}\n$")

elseif(CASE STREQUAL "golden_batch_stdin")
  # Both prompts of each scenario as a batch from standard input: exactly the reference's greedy
  # completions (the same forward calls as its generator).
  foreach(scenario tiny_bf16 tiny_bf16_rope_interleaved tiny_fp8_ue8m0_yarn tiny_fp8_plain_scale)
    file(READ "${golden}/${scenario}/manifest.json" manifest)
    string(JSON max_new GET "${manifest}" max_new_tokens)
    set(lines "")
    set(want "")
    foreach(b 0 1)
      string(JSON len LENGTH "${manifest}" prompts ${b})
      manifest_row("${manifest}" prompts ${b} 0 ${len} prompt)
      math(EXPR end "${len} + ${max_new}")
      manifest_row("${manifest}" final_tokens ${b} ${len} ${end} expected)
      string(APPEND lines "${prompt}\n")
      string(APPEND want "${expected}\n")
    endforeach()
    run(RC 0 ARGS --checkpoint "${golden}/${scenario}" --batch-file - --temperature 0 --max-new-tokens ${max_new}
        INPUT "${lines}" STDOUT "^${want}$" STDERR "2 prompt\\(s\\)")
  endforeach()
  # and from a file, sampled: the same seed gives the same tokens (CMake regexes have no {n})
  set(five_ids "[0-9]+ [0-9]+ [0-9]+ [0-9]+ [0-9]+")
  file(WRITE "${WORK_DIR}/prompts.txt" "1 2 3\n\n4, 5, 6, 7\n")
  run(RC 0 ARGS --checkpoint "${golden}/tiny_bf16" --batch-file "${WORK_DIR}/prompts.txt" --seed 7 --top-k 20
                --top-p 0.9 --max-new-tokens 5 STDOUT "^${five_ids}\n${five_ids}\n$")
  set(first "${out}")
  run(RC 0 ARGS --checkpoint "${golden}/tiny_bf16" --batch-file "${WORK_DIR}/prompts.txt" --seed 7 --top-k 20
                --top-p 0.9 --max-new-tokens 5 --quiet)
  if(NOT out STREQUAL first)
    message(FATAL_ERROR "same seed, different tokens:\n${first}\n${out}")
  endif()

elseif(CASE STREQUAL "bad_arguments")
  run(RC 2 ARGS --bogus STDERR "unknown argument '--bogus'" "--help for usage")
  run(RC 2 ARGS --max-new-tokens STDERR "--max-new-tokens: needs a value")
  run(RC 2 ARGS --max-new-tokens ten STDERR "--max-new-tokens: expects an integer in \\[0, 1099511627776\\], got 'ten'")
  run(RC 2 ARGS --max-new-tokens -3 STDERR "--max-new-tokens: expects an integer in \\[0,")
  run(RC 2 ARGS --temperature -1 STDERR "temperature must be finite and >= 0")
  run(RC 2 ARGS --top-p 0 STDERR "top_p must be in \\(0, 1\\]")
  run(RC 2 ARGS --top-k -1 STDERR "--top-k: expects an integer")
  run(RC 2 ARGS --seed x STDERR "--seed: expects a non-negative 64-bit integer, got 'x'")
  run(RC 2 ARGS --prompt-ids "1 2" --batch-file f STDERR "give one input")
  run(RC 1 ARGS --prompt-ids "1 x" STDERR "--prompt-ids: 'x' \\(id 2\\) is not a token id: expected a decimal integer")
  run(RC 1 ARGS --prompt-ids "1 -5" STDERR "'-5' \\(id 2\\) is not a token id")
  run(RC 1 ARGS --prompt-ids " " STDERR "a prompt holds no token ids")
  run(RC 1 ARGS --prompt-ids "1 999999" --max-new-tokens 1
      STDERR "prompt 0 token 1 is 999999, outside the vocabulary \\[0, 129280\\)")
  run(RC 1 ARGS --checkpoint "${golden}/tiny_bf16" --prompt-ids "1 2 3" --max-seq-len 2
      STDERR "prompt 0 has 3 tokens, more than the model's max_seq_len = 2")

elseif(CASE STREQUAL "world_size")
  # --world-size 2: the ranks as threads of this process; rank 0 prints, a failure on the ranks is
  # one message (the MPI variant: tests/parallel/generate_mpi_test.cmake).
  run(RC 0 ARGS --world-size 2 --prompt-ids "1 17 42 99" --max-new-tokens 8 --temperature 0
      STDOUT "^[0-9]+( [0-9]+)+\n$" STDERR "model parallel: 2 ranks" "${timing}")
  file(WRITE "${WORK_DIR}/batch.txt" "1 17 42\n5 6 7 8 9\n")
  run(RC 0 ARGS --world-size 2 --batch-file "${WORK_DIR}/batch.txt" --max-new-tokens 4 --temperature 0.7 --quiet
      STDOUT "^[0-9]+( [0-9]+)*\n[0-9]+( [0-9]+)*\n$")
  run(RC 1 ARGS --world-size 2 --checkpoint "${golden}/tiny_bf16" --prompt-ids "1 2"
      STDERR "rank 0 of 2 failed loading the model \\(rank 1 failed too\\): n_heads \\(3\\) must be divisible by the world size \\(2\\)")
  run(RC 1 ARGS --world-size 2 --prompt-ids "1 x" STDERR "'x' \\(id 2\\) is not a token id")
  run(RC 2 ARGS --world-size 0 STDERR "--world-size: expects an integer in \\[1, 1024\\]")
  run(RC 2 ARGS --world-size 2 --replay-ids "${WORK_DIR}/batch.txt" STDERR "--replay-ids replaces the model")

elseif(CASE STREQUAL "bad_files")
  run(RC 1 ARGS --checkpoint "${WORK_DIR}/missing" STDERR "checkpoint directory .*missing does not exist")
  run(RC 1 ARGS --checkpoint "${WORK_DIR}" STDERR "has no config.json")
  file(WRITE "${WORK_DIR}/broken/config.json" "{\"dim\": ")
  run(RC 1 ARGS --checkpoint "${WORK_DIR}/broken" STDERR "config.json: not valid JSON")
  # a config no compiled config matches
  file(READ "${golden}/tiny_bf16/config.json" config)
  string(JSON config SET "${config}" dim 80)
  file(WRITE "${WORK_DIR}/other/config.json" "${config}")
  run(RC 1 ARGS --checkpoint "${WORK_DIR}/other" STDERR "matches none of the configs compiled into this program")
  # a config without its weights
  file(COPY "${golden}/tiny_bf16/config.json" DESTINATION "${WORK_DIR}/no_weights")
  run(RC 1 ARGS --checkpoint "${WORK_DIR}/no_weights" STDERR "no_weights")
  run(RC 1 ARGS --batch-file "${WORK_DIR}/none.txt" STDERR "cannot open batch file")
  file(WRITE "${WORK_DIR}/blank.txt" "\n  \n")
  run(RC 1 ARGS --batch-file "${WORK_DIR}/blank.txt" STDERR "holds no prompt")

elseif(CASE STREQUAL "chat_session")
  # The embedded model (vocabulary 129280) with the vendored DeepSeek-V3.2-Exp tokenizer (the
  # default), fed a session.
  run(RC 0 ARGS --chat --max-new-tokens 8 INPUT "hello\n/clear\nhi\n/exit\n"
      STDOUT "^>>> [^\n]*\n>>> >>> [^\n]*\n>>> $" STDERR "${timing}.*${timing}")
  # end of input ends the session too
  run(RC 0 ARGS --chat --tokenizer "${tokenizer}" --max-new-tokens 4 --quiet INPUT "hello\n"
      STDOUT "^>>> [^\n]*\n>>> \n$")
  # The replies, greedy, are exactly what generating from the chat template's ids gives: the first
  # turn; a turn after /clear (a fresh conversation); a second turn, whose prompt holds the exchange
  # before it (the reply as the assistant's message).
  chat_ids("[{\"role\": \"user\", \"content\": \"hello\"}]" hello_ids)
  continuation("${hello_ids}" 8 reply_hello)
  chat_ids("[{\"role\": \"user\", \"content\": \"hi\"}]" hi_ids)
  continuation("${hi_ids}" 8 reply_hi)
  set(history "[]")
  string(JSON history SET "${history}" 0 "{\"role\": \"user\", \"content\": \"hi\"}")
  string(JSON history SET "${history}" 1 "{\"role\": \"assistant\", \"content\": \"\"}")
  json_string("${reply_hi}" reply_hi_json)
  string(JSON history SET "${history}" 1 content "${reply_hi_json}")
  string(JSON history SET "${history}" 2 "{\"role\": \"user\", \"content\": \"hello\"}")
  chat_ids("${history}" second_ids)
  continuation("${second_ids}" 8 reply_second)
  run(RC 0 ARGS --chat --tokenizer "${tokenizer}" --max-new-tokens 8 --temperature 0 --quiet
      INPUT "hello\n/clear\nhi\nhello\n/exit\n")
  set(want ">>> ${reply_hello}\n>>> >>> ${reply_hi}\n>>> ${reply_second}\n>>> ")
  if(NOT out STREQUAL want)
    message(FATAL_ERROR "chat replies differ from generation on the chat template's ids:\n--- got:\n${out}\n--- want:\n${want}")
  endif()
  # DeepSeek-V3's tokenizer and template
  run(RC 0 ARGS --chat --tokenizer "${tokenizer_v3}" --max-new-tokens 4 --quiet INPUT "hello\n"
      STDOUT "^>>> [^\n]*\n>>> \n$")
  # Thinking mode: the random model's tokens are all reasoning (it never closes it), marked as such;
  # the conversation keeps only the (empty) answer, so the second prompt is
  # bos <｜User｜> Hello ! <｜Assistant｜> </think> eos <｜User｜> Hello ! <｜Assistant｜> <think>.
  run(RC 0 ARGS --chat --thinking --max-new-tokens 6 --temperature 0 INPUT "Hello!\nHello!\n"
      STDOUT "^>>> <think>[^\n]*</think>\n>>> <think>[^\n]*</think>\n>>> \n$"
      STDERR "6 prompt tokens, 6 generated.*12 prompt tokens, 6 generated")
  # a tool output needs a tool call before it; the session goes on
  run(RC 0 ARGS --chat --max-new-tokens 2 --quiet INPUT "/tool 42\nhi\n"
      STDOUT "^>>> >>> [^\n]*\n>>> \n$" STDERR "chat message 0: a tool message must follow an assistant message")

elseif(CASE STREQUAL "chat_replay")
  # --replay-ids: fixed replies (ids from the tokenizer case files), so that what is shown and what
  # the conversation keeps can be checked exactly.
  #   reply 1: "\nLet me reason.\n" </think> "\n\nThe answer is 42." eos
  #   reply 2: </think> "Checking." and a call get_weather {"city": "Paris"}, eos
  #   reply 3: "Hello!" eos
  file(WRITE "${WORK_DIR}/replies.txt"
       "201 5718 678 3986 603 128799 271 671 3287 344 223 3180 16 1\n"
       "128799 123452 16 128806 128808 1133 65 50219 128814 24313 37399 3362 582 51119 62773 128809 128807 1\n"
       "19923 3 1\n")
  set(call_line "{\"function\":{\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\",\"name\":\"get_weather\"},\"type\":\"function\"}")
  run(RC 0 ARGS --chat --thinking --replay-ids "${WORK_DIR}/replies.txt" INPUT "Hello!\nWhat is 2+2?\n/tool 3 results\n"
      STDERR "6 prompt tokens, 13 generated.*24 prompt tokens, 17 generated.*45 prompt tokens, 2 generated")
  # The reasoning between <think> and </think>, then the answer; the tool call as a JSON line.
  set(expected ">>> <think>\nLet me reason.\n</think>\n\n\nThe answer is 42.\n>>> Checking.\n${call_line}\n>>> Hello!\n>>> \n")
  if(NOT out STREQUAL expected)
    message(FATAL_ERROR "chat replay: expected\n${expected}\ngot\n${out}")
  endif()
  # The prompt token counts above are those of the conversation with the answers only (token
  # counts from the case files): 6 = bos <｜User｜> Hello ! <｜Assistant｜> <think>; 24 = the first 5,
  # </think>, the answer's 7 tokens, eos, <｜User｜>, "What is 2+2?" (7), <｜Assistant｜> <think>;
  # 45 = those 24 with </think> for <think>, the call turn ("Checking." 2, 4 markers, name 3,
  # arguments 6, <｜tool▁calls▁end｜>, eos: 17) and the tool output (4). Reasoning kept in the answer
  # would add 5.

  # On a terminal (a pseudo-terminal from util-linux's script, when there is one) the reasoning is
  # dimmed instead: SGR 2 ... SGR 0, then a line break before the answer.
  if(SCRIPT)
    execute_process(COMMAND "${CMAKE_COMMAND}" -E env --unset=NO_COLOR "${SCRIPT}" -qec "\"${TOOL}\" --prompt Hello! --thinking --quiet --replay-ids \"${WORK_DIR}/replies.txt\"" /dev/null
                    RESULT_VARIABLE rc OUTPUT_VARIABLE tty_out ERROR_VARIABLE tty_err)
    string(ASCII 27 esc)
    string(REPLACE "\r\n" "\n" tty_out "${tty_out}")
    set(expected "${esc}[2m\nLet me reason.\n${esc}[0m\n\nThe answer is 42.\n")
    if(NOT rc EQUAL 0 OR NOT tty_out STREQUAL expected)
      message(FATAL_ERROR "on a terminal: status ${rc}, expected\n${expected}\ngot\n${tty_out}\n${tty_err}")
    endif()
  endif()

  # One text prompt, and a batch: the same display.
  run(RC 0 ARGS --prompt "Hello!" --thinking --replay-ids "${WORK_DIR}/replies.txt" --quiet
      STDOUT "^<think>\nLet me reason.\n</think>\n\n\nThe answer is 42.\n$")
  file(WRITE "${WORK_DIR}/prompts.txt" "Hello!\nWhat is 2+2?\n")
  run(RC 0 ARGS --batch-file "${WORK_DIR}/prompts.txt" --text --thinking --replay-ids "${WORK_DIR}/replies.txt" --quiet)
  set(expected "Prompt: Hello!\nCompletion: <think>\nLet me reason.\n</think>\n\n\nThe answer is 42.\n\nPrompt: What is 2+2?\nCompletion: Checking.\n${call_line}\n\n")
  if(NOT out STREQUAL expected)
    message(FATAL_ERROR "batch replay: expected\n${expected}\ngot\n${out}")
  endif()
  # Without thinking mode, reply 1's </think> after text breaks the format: a warning, then the
  # rest as generated.
  run(RC 0 ARGS --prompt "Hello!" --replay-ids "${WORK_DIR}/replies.txt" --quiet
      STDOUT "^\nLet me reason.\n</think>\n\nThe answer is 42.\n$"
      STDERR "chat output: found </think> at byte 16 of the reply \\(expected answer text.*the rest of the reply is shown as generated")
  # An id the tokenizer lacks (padding rows of a model's vocabulary): U+FFFD, and standard error names it.
  file(WRITE "${WORK_DIR}/oov.txt" "19923 129000 3 1\n")
  run(RC 0 ARGS --prompt "Hello!" --replay-ids "${WORK_DIR}/oov.txt" --quiet STDOUT "^Hello�!\n$"
      STDERR "the model generated token id 129000, which is outside the tokenizer's vocabulary \\[0, 128815\\)")
  # A replay file that is not ids, or runs out.
  run(RC 1 ARGS --prompt "Hello!" --replay-ids "${WORK_DIR}/prompts.txt" --quiet STDERR "prompts.txt line 1: 'Hello!' \\(id 1\\) is not a token id")
  file(WRITE "${WORK_DIR}/one.txt" "19923 3\n")
  run(RC 1 ARGS --chat --replay-ids "${WORK_DIR}/one.txt" --quiet INPUT "a\nb\n" STDOUT "^>>> Hello!\n>>> $"
      STDERR "replay file .*one.txt has no line left for reply 2")

elseif(CASE STREQUAL "chat_replay_v3_2")
  # DeepSeek-V3.2's chat format (--chat-format deepseek-v3.2; the vendored tokenizer is V3.2-Exp's,
  # whose tokenizer.json V3.2 shares), in thinking mode, on fixed replies (ids from dsv32-tokenize):
  #   reply 1: reasoning </think> "Let me check." and a DSML call get_weather {"city": "Paris"}, eos
  #   reply 2: reasoning </think> "It is 21 °C in Paris." eos
  #   reply 3: "T" </think> "Hi." and a DSML block whose invoke is malformed, eos
  file(WRITE "${WORK_DIR}/replies.txt"
       "43 1531 1926 270 9670 4105 1257 16 128799 5718 678 4085 339 30 28217 10525 7398 28217 8701 4941 12548 1018 30 "
       "28217 10525 7398 28217 40148 5406 2329 1281 1133 65 50219 3816 30 28217 10525 7398 28217 41523 2329 1281 37399 "
       "4 3418 1281 11476 3320 51119 1718 28217 10525 7398 28217 41523 1018 1718 28217 10525 7398 28217 40148 5406 1018 "
       "1718 28217 10525 7398 28217 8701 4941 12548 32 1\n"
       "671 4105 4230 223 1602 345 16 128799 2107 344 223 1602 8490 37 295 11111 16 1\n"
       "54 128799 23166 339 30 28217 10525 7398 28217 8701 4941 12548 1018 30 28217 10525 7398 28217 40148 5406 9303 "
       "1281 90 3816 1718 28217 10525 7398 28217 40148 5406 1018 1718 28217 10525 7398 28217 8701 4941 12548 32 1\n")
  run(RC 0 ARGS --chat --chat-format deepseek-v3.2 --thinking --replay-ids "${WORK_DIR}/replies.txt"
      INPUT "Weather in Paris?\n/tool 21 C\nAgain?\n"
      STDERR "DeepSeek-V3.2 reply: a call's name must follow <｜DSML｜invoke as ` name=\"NAME\">`.* at byte 58; the rest of the reply is shown as generated")
  # Reasoning and answer apart, the call as a JSON line; the malformed block shown as generated.
  set(expected [=[>>> <think>I should call the weather tool first.</think>
Let me check.
{"function":{"arguments":"{\"city\": \"Paris\"}","name":"get_weather"},"type":"function"}
>>> <think>The tool says 21 C.</think>
It is 21 °C in Paris.
>>> <think>T</think>
Hi.

<｜DSML｜function_calls>
<｜DSML｜invoke nom="x">
</｜DSML｜invoke>
</｜DSML｜function_calls>
>>> 
]=])
  if(NOT out STREQUAL expected)
    message(FATAL_ERROR "V3.2 chat replay: expected\n${expected}\ngot\n${out}")
  endif()
  # The prompts are DeepSeek-V3.2's encoding of the conversation so far: the tool turn keeps the
  # call's reasoning (printed after the last user message), the next user turn drops it.
  function(v3_2_prompt_tokens request out_var)
    file(WRITE "${WORK_DIR}/request.json" "${request}")
    execute_process(COMMAND "${TOKENIZE}" --tokenizer "${tokenizer}" --chat-format deepseek-v3.2 --chat --ids
                    INPUT_FILE "${WORK_DIR}/request.json" RESULT_VARIABLE rc OUTPUT_VARIABLE ids ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "dsv32-tokenize --chat-format deepseek-v3.2 --chat --ids: exit status ${rc}: ${err}")
    endif()
    string(JSON n LENGTH "${ids}")
    set(${out_var} ${n} PARENT_SCOPE)
  endfunction()
  set(turns [=[{"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "Let me check.", "reasoning_content": "I should call the weather tool first.",
     "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "content": "21 C"}]=])
  v3_2_prompt_tokens([=[{"messages": [{"role": "user", "content": "Weather in Paris?"}], "thinking_mode": "thinking"}]=] first)
  v3_2_prompt_tokens("{\"messages\": [${turns}], \"thinking_mode\": \"thinking\"}" second)
  v3_2_prompt_tokens("{\"messages\": [${turns}, {\"role\": \"assistant\", \"content\": \"It is 21 °C in Paris.\", \"reasoning_content\": \"The tool says 21 C.\"}, {\"role\": \"user\", \"content\": \"Again?\"}], \"thinking_mode\": \"thinking\"}" third)
  run(RC 0 ARGS --chat --chat-format deepseek-v3.2 --thinking --replay-ids "${WORK_DIR}/replies.txt"
      INPUT "Weather in Paris?\n/tool 21 C\nAgain?\n"
      STDERR "${first} prompt tokens, 74 generated.*${second} prompt tokens, 17 generated.*${third} prompt tokens, 41 generated")
  # Two calls: one /tool line per call, and the model answers after the last (one generation).
  file(WRITE "${WORK_DIR}/two_calls.txt"
       "14959 10699 16 128799 271 30 28217 10525 7398 28217 8701 4941 12548 1018 30 28217 10525 7398 28217 40148 5406 "
       "2329 1281 72 32572 1718 28217 10525 7398 28217 40148 5406 1018 30 28217 10525 7398 28217 40148 5406 2329 1281 "
       "73 32572 1718 28217 10525 7398 28217 40148 5406 1018 1718 28217 10525 7398 28217 8701 4941 12548 32 1\n"
       "11932 16 128799 26545 3989 16 1\n")
  run(RC 0 ARGS --chat --chat-format deepseek-v3.2 --thinking --replay-ids "${WORK_DIR}/two_calls.txt"
      INPUT "Do two things.\n/tool one\n/tool two\n")
  set(expected [=[>>> <think>Two calls.</think>
{"function":{"arguments":"{}","name":"f"},"type":"function"}
{"function":{"arguments":"{}","name":"g"},"type":"function"}
>>> >>> <think>OK.</think>
Both done.
>>> 
]=])
  if(NOT out STREQUAL expected)
    message(FATAL_ERROR "V3.2 two calls: expected\n${expected}\ngot\n${out}")
  endif()

  # A tokenizer directory with an encoding/ folder (DeepSeek-V3.2's layout) chooses the format itself.
  file(MAKE_DIRECTORY "${WORK_DIR}/v3_2/encoding")
  file(COPY "${tokenizer}/tokenizer.json" "${tokenizer}/tokenizer_config.json" DESTINATION "${WORK_DIR}/v3_2")
  run(RC 0 ARGS --prompt "Weather in Paris?" --tokenizer "${WORK_DIR}/v3_2" --thinking --replay-ids "${WORK_DIR}/replies.txt"
      --quiet STDOUT "^<think>I should call the weather tool first.</think>\nLet me check.\n{\"function\":")
  run(RC 2 ARGS --chat --chat-format deepseek-v4 STDERR "--chat-format: expects deepseek-v3.2, deepseek-v3.2-exp or deepseek-v3, got 'deepseek-v4'")

elseif(CASE STREQUAL "text_prompt")
  # --prompt renders the chat template; --raw encodes the text alone (with bos). Each prints exactly
  # what generating from those ids gives, decoded.
  chat_ids("[{\"role\": \"user\", \"content\": \"Hello, world\"}]" chat_prompt)
  continuation("${chat_prompt}" 6 want_chat)
  run(RC 0 ARGS --tokenizer "${tokenizer}" --prompt "Hello, world" --max-new-tokens 6 --temperature 0
      STDOUT "^[^\n]+\n$" STDERR "${timing}")
  if(NOT out STREQUAL "${want_chat}\n")
    message(FATAL_ERROR "--prompt printed '${out}', generation on the chat template's ids gives '${want_chat}'")
  endif()
  execute_process(COMMAND "${TOKENIZE}" --tokenizer "${tokenizer}" --add-special --text "Hello, world"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE raw_prompt)
  if(NOT rc EQUAL 0 OR NOT raw_prompt STREQUAL "[0,19923,14,2058]\n")
    message(FATAL_ERROR "dsv32-tokenize --add-special: exit status ${rc}, ids ${raw_prompt}")
  endif()
  continuation("${raw_prompt}" 6 want_raw)
  run(RC 0 ARGS --tokenizer "${tokenizer}" --prompt "Hello, world" --max-new-tokens 6 --temperature 0 --raw --quiet)
  if(NOT out STREQUAL "${want_raw}\n")
    message(FATAL_ERROR "--raw printed '${out}', generation on the text's own ids gives '${want_raw}'")
  endif()
  if(want_raw STREQUAL want_chat)
    message(FATAL_ERROR "--raw and the chat template gave the same text '${want_raw}': the check cannot tell them apart")
  endif()
  file(WRITE "${WORK_DIR}/prompts.txt" "Hello\nWhat is 2+2?\n")
  run(RC 0 ARGS --tokenizer "${tokenizer}" --batch-file "${WORK_DIR}/prompts.txt" --text --max-new-tokens 4
      STDOUT "^Prompt: Hello\nCompletion: [^\n]*\n\nPrompt: What is 2\\+2\\?\nCompletion: [^\n]*\n\n$")
  run(RC 2 ARGS --raw --prompt-ids "1" STDERR "--raw applies to text prompts")

elseif(CASE STREQUAL "thinking_arguments")
  run(RC 2 ARGS --thinking --prompt-ids "1 2" STDERR "--thinking applies to chat-template prompts")
  run(RC 2 ARGS --thinking --raw --prompt "x" STDERR "--thinking applies to chat-template prompts")
  run(RC 2 ARGS --replay-ids f --checkpoint "${golden}/tiny_bf16" STDERR "--replay-ids replaces the model")
  run(RC 1 ARGS --thinking --prompt "x" --tokenizer "${tokenizer_v3}"
      STDERR "--thinking: the chat format of the tokenizer in .*deepseek_v3 \\(DeepSeek-V3's\\) has no thinking mode")
  run(RC 1 ARGS --prompt "x" --replay-ids "${WORK_DIR}/missing.txt" STDERR "cannot open replay file")

elseif(CASE STREQUAL "text_needs_vocabulary")
  run(RC 1 ARGS --checkpoint "${golden}/tiny_bf16" --tokenizer "${tokenizer}" --prompt "hi"
      STDERR "has 128815 token ids but the model's vocab_size is 300: text modes need a model whose vocabulary covers")
  run(RC 1 ARGS --checkpoint "${golden}/tiny_bf16" --tokenizer "${WORK_DIR}" --prompt "hi" STDERR "tokenizer")

else()
  message(FATAL_ERROR "unknown CASE ${CASE}")
endif()
