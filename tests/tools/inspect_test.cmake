# Tests of dsv32-inspect, one CASE per ctest (see tests.cmake): runs the tool, checks its exit status
# and that its output matches (or does not match) regular expressions, and reads its --json output.
# Variables: CASE, TOOL (dsv32-inspect), HELPER (make_test_checkpoint), DATA (tests/data), WORK_DIR.
cmake_minimum_required(VERSION 3.20)

# inspect(RC <status> ARGS <args...> [EXPECT <regex>...] [REJECT <regex>...]): runs the tool; the
# combined stdout and stderr is left in `out`.
function(inspect)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "RC" "ARGS;EXPECT;REJECT")
  execute_process(COMMAND "${TOOL}" ${arg_ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)
  set(all "${stdout}${stderr}")
  if(NOT rc STREQUAL arg_RC)
    message(FATAL_ERROR "dsv32-inspect ${arg_ARGS}: expected exit status ${arg_RC}, got ${rc}\n${all}")
  endif()
  foreach(regex IN LISTS arg_EXPECT)
    if(NOT all MATCHES "${regex}")
      message(FATAL_ERROR "dsv32-inspect ${arg_ARGS}: output does not match '${regex}':\n${all}")
    endif()
  endforeach()
  foreach(regex IN LISTS arg_REJECT)
    if(all MATCHES "${regex}")
      message(FATAL_ERROR "dsv32-inspect ${arg_ARGS}: output matches '${regex}':\n${all}")
    endif()
  endforeach()
  set(out "${stdout}" PARENT_SCOPE)
endfunction()

# json_expect(<json> <expected value> <path...>): a field of the tool's --json output.
function(json_expect json expected)
  string(JSON value ERROR_VARIABLE error GET "${json}" ${ARGN})
  if(error OR NOT value STREQUAL expected)
    message(FATAL_ERROR "JSON field ${ARGN}: expected '${expected}', got '${value}' ${error}")
  endif()
endfunction()

set(preset_671b deepseek-v3.2-exp-671b)
set(golden "${DATA}/golden")

if(CASE STREQUAL "preset_671b")
  inspect(RC 0 ARGS --preset ${preset_671b}
          EXPECT "config: preset deepseek-v3.2-exp-671b \\(compiled config deepseek-v3.2-exp-671b\\)"
                 "n_layers +61\n" "dim +7168\n" "n_routed_experts +256\n"
                 "total +671,877,944,064\n"
                 "activated per token +38,403,822,336 "
                 "embedding +926,679,040 "
                 "attention, per layer +201,081,088 "
                 "expert \\(routed or shared\\) +44,040,192 "
                 "Weights by dtype \\(the tensor table\\)"
                 "BF16 weights +3,975,544,832 B "
                 "forward scratch"
                 "F8_E4M3 weights +669,889,134,592 B "
                 "F32 block scales \\(1 per 128x128\\) +163,553,984 B "
                 "MLA latent \\+ rope key, bf16 +1,152 B"
                 "indexer keys, FP8 \\+ scales +132 B"
                 "per layer +1,284 B\n"
                 "all 61 layers +78,324 B"
                 "Memory plan \\(batch 8, seq_len 16384\\)"
                 "KV \\+ indexer caches +10,266,083,328 B")
  inspect(RC 0 ARGS --preset ${preset_671b} --batch 1 --seq-len 16384 --json)
  json_expect("${out}" 671877944064 parameters total)
  json_expect("${out}" 38403822336 parameters activated)
  json_expect("${out}" 78324 cache_bytes_per_token all_layers)
  json_expect("${out}" 1283260416 memory_plan caches)  # 16384 x 78,324
  # Smaller passes shrink only the forward scratch.
  string(JSON scratch_full GET "${out}" memory_plan scratch)
  inspect(RC 0 ARGS --preset ${preset_671b} --batch 1 --seq-len 16384 --tokens-per-call 512 --json)
  json_expect("${out}" 512 memory_plan tokens_per_call)
  json_expect("${out}" 1283260416 memory_plan caches)
  string(JSON scratch_512 GET "${out}" memory_plan scratch)
  if(NOT scratch_512 LESS scratch_full)
    message(FATAL_ERROR "scratch for 512-token passes (${scratch_512}) not below one-pass scratch (${scratch_full})")
  endif()
  json_expect("${out}" "tensor table" weights source)
  # the serving engine's pool for 100 GiB: 78,324 B per position x 64 per page = 5,012,736 B a page
  inspect(RC 0 ARGS --preset ${preset_671b} --cache-budget 100G
          EXPECT "Serving engine's page pool \\(pages of 64 positions, every layer\\)" "pages +21,420\n"
                 "positions +1,370,880 += 83 sequences of max_seq_len" "per page +5,012,736 B"
                 "pool +107,372,805,120 B")
  inspect(RC 0 ARGS --preset ${preset_671b} --cache-budget 107374182400 --page-size 16 --json)
  json_expect("${out}" 85681 page_pool pages)
  json_expect("${out}" 1370896 page_pool tokens)
  # Per rank: 8 ranks split heads, experts, dense MLPs and vocabulary; caches are per rank in full.
  inspect(RC 0 ARGS --preset=${preset_671b} --world-size=8 --json)
  json_expect("${out}" 8 memory_plan world_size)
  json_expect("${out}" 86021900672 memory_plan weights)  # the bf16 head: 129280 / 8 x 7168 x 2 B
  json_expect("${out}" 10266083328 memory_plan caches)

elseif(CASE STREQUAL "config_tiny_bf16")
  inspect(RC 0 ARGS --config "${golden}/tiny_bf16/config.json" --batch 2 --seq-len 48
          EXPECT "compiled config tiny_bf16\\)" "total +695,248\n" "Memory plan \\(batch 2, seq_len 48\\)"
                 "all 3 layers +636 B" "KV \\+ indexer caches +61,056 B" "BF16 weights +1,387,008 B")
  # Without flags the config.json's own max_batch_size and max_seq_len size the plan.
  inspect(RC 0 ARGS --config "${golden}/tiny_fp8_ue8m0_yarn/config.json" EXPECT "Memory plan \\(batch 2, seq_len 64\\)"
          "F8_E4M3 weights" "F32 block scales")

elseif(CASE STREQUAL "config_custom")
  # A config.json no compiled config matches: sizes from the same tensor table.
  file(READ "${golden}/tiny_bf16/config.json" json)
  string(JSON json SET "${json}" dim 128)
  file(MAKE_DIRECTORY "${WORK_DIR}")
  file(WRITE "${WORK_DIR}/custom_config.json" "${json}")
  inspect(RC 0 ARGS --config "${WORK_DIR}/custom_config.json"
          EXPECT "matches no compiled config" "Weights by dtype \\(the tensor table\\)" "Memory plan \\(batch 2, seq_len 48\\)")
  inspect(RC 0 ARGS --config "${WORK_DIR}/custom_config.json" --json)
  json_expect("${out}" "tensor table" weights source)
  json_expect("${out}" "" config compiled)  # null reads as ""
  string(JSON total GET "${out}" parameters total)
  string(JSON on_rank GET "${out}" weights parameters)
  if(NOT total EQUAL on_rank)
    message(FATAL_ERROR "the tensor table holds ${on_rank} parameters, count_params says ${total}")
  endif()
  # ... and a checkpoint is checked against its table too: the tiny_bf16 checkpoint does not fit dim 128.
  inspect(RC 1 ARGS --checkpoint "${golden}/tiny_bf16" --config "${WORK_DIR}/custom_config.json"
          EXPECT "matches no compiled config" "tensor 'embed.weight'|embed.weight: has BF16 \\[300, 96\\], expected BF16 \\[300, 128\\]"
                 "result: INCOMPLETE")

elseif(CASE STREQUAL "per_rank")
  # Each rank's share, from the tensor table at world size W: the replicated tensors (norms, the indexer,
  # wq_a, wkv_a, the gate) on every rank, the split ones divided by W, the routed experts dealt out whole;
  # the ranks' parameters add up to the model's when the replicated ones are counted once.
  foreach(c "deepseek-v3.2-exp-671b 8" "tiny_fp8_ue8m0_yarn 4" "tiny_fp8_plain_scale 2")
    separate_arguments(c)
    list(GET c 0 preset)
    list(GET c 1 world)
    inspect(RC 0 ARGS --preset ${preset} --json)
    string(JSON one GET "${out}" weights parameters)
    inspect(RC 0 ARGS --preset ${preset} --world-size ${world} --json)
    json_expect("${out}" ${world} memory_plan world_size)
    string(JSON per_rank GET "${out}" weights parameters)
    math(EXPR all "${per_rank} * ${world}")
    if(NOT per_rank LESS one OR NOT all GREATER_EQUAL one)
      message(FATAL_ERROR "${preset} at world size ${world}: ${per_rank} parameters per rank of ${one}")
    endif()
  endforeach()

elseif(CASE STREQUAL "checkpoint_complete")
  inspect(RC 0 ARGS --checkpoint "${golden}/tiny_fp8_plain_scale"
          EXPECT "compiled config tiny_fp8_plain_scale\\)" "present +278 +\\(all\\)" "missing +0\n" "extra +0\n"
                 "278 expected, 278 present, 0 missing, 0 extra, 0 with the wrong dtype or shape"
                 "result: complete")
  inspect(RC 0 ARGS --checkpoint "${golden}/tiny_bf16/model0-mp1.safetensors" --json --all)
  json_expect("${out}" ON complete)  # string(JSON GET) reads booleans as ON/OFF
  json_expect("${out}" 106 present)
  json_expect("${out}" 0 missing)
  json_expect("${out}" 0 extra)
  json_expect("${out}" OFF shards 0 truncated)
  json_expect("${out}" head.weight shards 0 present_names 105)

elseif(CASE STREQUAL "checkpoint_damaged")
  # A copy of a golden checkpoint without one tensor, with one the model does not have, and with
  # one stored in the wrong shape.
  set(dir "${WORK_DIR}/damaged")
  execute_process(COMMAND "${HELPER}" "${golden}/tiny_fp8_plain_scale" "${dir}"
                          --drop layers.1.attn.wq_a.weight --extra layers.1.attn.bogus.weight
                          --flatten layers.2.attn.wkv_b.weight
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "make_test_checkpoint failed (${rc})")
  endif()
  inspect(RC 1 ARGS --checkpoint "${dir}"
          EXPECT "missing +1\n" "extra +1\n" "wrong dtype or shape +1\n"
                 "missing \\(1\\):\n +layers\\.1\\.attn\\.wq_a\\.weight \\(expected F8_E4M3 \\[128, 256\\]\\)"
                 "extra \\(1\\):\n +layers\\.1\\.attn\\.bogus\\.weight \\(F32 \\[1\\]\\)"
                 "layers\\.2\\.attn\\.wkv_b\\.weight: has F8_E4M3 \\[[0-9]+\\], expected F8_E4M3 \\[256, 128\\]"
                 "278 expected, 277 present, 1 missing, 1 extra, 1 with the wrong dtype or shape"
                 "result: INCOMPLETE")
  inspect(RC 1 ARGS --checkpoint "${dir}" --json --limit 0)
  json_expect("${out}" OFF complete)
  json_expect("${out}" 1 missing)
  string(JSON listed LENGTH "${out}" shards 0 present_names)
  if(NOT listed EQUAL 0)
    message(FATAL_ERROR "--limit 0 listed ${listed} present names")
  endif()
  inspect(RC 1 ARGS --checkpoint "${dir}" --json)
  json_expect("${out}" layers.1.attn.wq_a.weight shards 0 missing_tensors 0 name)
  json_expect("${out}" layers.1.attn.bogus.weight shards 0 extra_tensors 0 name)
  # An absent shard: every tensor of its rank is missing.
  inspect(RC 1 ARGS --checkpoint "${golden}/tiny_fp8_plain_scale" --world-size 2 --limit 1
          EXPECT "model1-mp2.safetensors \\(rank 1\\): absent" "\\.\\.\\. and [0-9]+ more \\(--all lists every one\\)")

elseif(CASE STREQUAL "checkpoint_hf")
  # Hugging Face checkpoints (registered when <dsv32/io/hf_checkpoint.hpp> exists): a golden
  # checkpoint rewritten in Hugging Face naming, whole and without one tensor.
  foreach(variant complete damaged)
    set(drop)
    if(variant STREQUAL "damaged")
      set(drop --drop layers.2.ffn.experts.3.w2.scale)
    endif()
    execute_process(COMMAND "${HELPER}" "${golden}/tiny_fp8_ue8m0_yarn" "${WORK_DIR}/${variant}" --hf ${drop}
                    RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "make_test_checkpoint --hf failed (${rc})")
    endif()
  endforeach()
  inspect(RC 0 ARGS --checkpoint "${WORK_DIR}/complete"
          EXPECT "Hugging Face format" "Hugging Face naming \\(compiled config tiny_fp8_ue8m0_yarn\\)"
                 "280 expected, 280 present, 0 missing, 0 extra" "result: complete")
  inspect(RC 1 ARGS --checkpoint "${WORK_DIR}/damaged"
          EXPECT "missing \\(1\\):\n +layers\\.2\\.ffn\\.experts\\.3\\.w2\\.scale \\(expected F32 \\[2, 1\\]\\), stored as model\\.layers\\.2\\.mlp\\.experts\\.3\\.down_proj\\.weight_scale_inv"
                 "result: INCOMPLETE")
  inspect(RC 0 ARGS --config "${WORK_DIR}/complete/config.json" EXPECT "Hugging Face naming \\(compiled config tiny_fp8_ue8m0_yarn\\)")
  # At world size W each rank's slice, as load_checkpoint() cuts it at load time: tiny_fp8_ue8m0_yarn's
  # FP8 dimensions hold too few 128-blocks to split over 2 ranks, so both ranks report the split's error.
  inspect(RC 1 ARGS --checkpoint "${WORK_DIR}/complete" --world-size 2
          EXPECT "\\(rank 0 of 2, dsv32 names\\): unreadable" "\\(rank 1 of 2, dsv32 names\\): unreadable" "result: INCOMPLETE")
  # tiny_bf16 has 3 heads: a world size of 2 is refused before any file is read.
  execute_process(COMMAND "${HELPER}" "${golden}/tiny_bf16" "${WORK_DIR}/bf16" --hf RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "make_test_checkpoint --hf failed (${rc})")
  endif()
  inspect(RC 2 ARGS --checkpoint "${WORK_DIR}/bf16" --world-size 2
          EXPECT "n_heads \\(3\\) must be divisible by the world size \\(2\\)")

elseif(CASE STREQUAL "bad_arguments")
  inspect(RC 2 ARGS --preset no-such-model
          EXPECT "unknown preset 'no-such-model'; the compiled presets are:" "deepseek-v3.2-exp-671b" "tiny_bf16"
                 "run dsv32-inspect --help for usage")
  inspect(RC 2 ARGS --preset ${preset_671b} --batch abc EXPECT "--batch: expects an integer in \\[1, 16777216\\], got 'abc'")
  inspect(RC 2 ARGS --preset ${preset_671b} --seq-len 0 EXPECT "--seq-len: expects an integer in \\[1, 2147483647\\], got '0'")
  inspect(RC 2 ARGS --preset ${preset_671b} --cache-budget 12X EXPECT "--cache-budget: expects a byte count .*, got '12X'")
  inspect(RC 2 ARGS --preset ${preset_671b} --cache-budget 2000000T EXPECT "--cache-budget: expects at most 2\\^60 bytes, got '2000000T'")
  inspect(RC 2 ARGS --preset ${preset_671b} --batch 99999999999999999999999 EXPECT "--batch: expects an integer")
  inspect(RC 2 ARGS --preset ${preset_671b} --world-size 3 EXPECT "must be divisible by the world size \\(3\\)")
  inspect(RC 2 ARGS --preset ${preset_671b} --world-size EXPECT "--world-size: needs a value")
  inspect(RC 2 ARGS --frobnicate EXPECT "unknown argument '--frobnicate'")
  inspect(RC 2 ARGS --preset ${preset_671b} --json=yes EXPECT "--json: takes no value")
  inspect(RC 2 ARGS EXPECT "nothing to inspect")
  inspect(RC 2 ARGS --preset ${preset_671b} --config x.json EXPECT "not both")
  inspect(RC 2 ARGS --config "${WORK_DIR}/no-such-config.json" EXPECT "cannot read config file .*no such file")
  inspect(RC 2 ARGS --config "${golden}/tiny_bf16/model0-mp1.safetensors" EXPECT "not valid JSON")
  inspect(RC 2 ARGS --checkpoint "${WORK_DIR}/no-such-dir" EXPECT "no such file or directory")
  file(MAKE_DIRECTORY "${WORK_DIR}/empty")
  inspect(RC 2 ARGS --checkpoint "${WORK_DIR}/empty" EXPECT "has no config.json")
  inspect(RC 0 ARGS --help EXPECT "usage:" "--checkpoint PATH" "Exit status")
  inspect(RC 0 ARGS --list-presets EXPECT "deepseek-v3.2-exp-671b +671,877,944,064 parameters")

else()
  message(FATAL_ERROR "unknown CASE '${CASE}'")
endif()
