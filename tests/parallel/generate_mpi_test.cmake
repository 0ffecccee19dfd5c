# dsv32-generate under mpirun -n 2 (registered by tests/parallel/tests.cmake, with Open MPI's
# environment for root and oversubscription, and one OpenMP thread per rank):
#  - the embedded model, greedy: one line of ids on standard output (rank 0 prints, rank 1 only
#    computes), exit status 0, the same ids as --world-size 2 (the ranks as threads of one process);
#  - a config whose heads do not divide by 2, one whose FP8 blocks would be cut, and a checkpoint
#    holding only a one-rank shard: exit status 1 and rank 0's one message, naming the cause, printed
#    once — no rank left waiting.
#   cmake -DGENERATE=<dsv32-generate> -DMPIEXEC=<mpirun> -DGOLDEN=<tests/data/golden>
#         -DCONFIGS=<tests/data/configs> -DWORK_DIR=<scratch> -P generate_mpi_test.cmake
cmake_minimum_required(VERSION 3.20)

function(run out_rc out_stdout out_stderr)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr TIMEOUT 240)
  set(${out_rc} "${rc}" PARENT_SCOPE)
  set(${out_stdout} "${stdout}" PARENT_SCOPE)
  set(${out_stderr} "${stderr}" PARENT_SCOPE)
endfunction()
set(mpirun "${MPIEXEC}" -n 2 --oversubscribe)
set(args --prompt-ids "1 17 42 99" --max-new-tokens 8 --temperature 0)

run(rc mpi_out mpi_err ${mpirun} "${GENERATE}" ${args})
if(NOT rc EQUAL 0 OR NOT mpi_out MATCHES "^[0-9]+( [0-9]+)+\n$")
  message(FATAL_ERROR "mpirun -n 2 dsv32-generate: exit status ${rc}, expected 0 and one line of ids\n--- stdout:\n${mpi_out}\n--- stderr:\n${mpi_err}")
endif()
string(REGEX MATCHALL "model parallel: 2 ranks" lines "${mpi_err}")
list(LENGTH lines n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "expected rank 0 alone to describe the model, found ${n} descriptions:\n${mpi_err}")
endif()
run(rc threads_out threads_err "${GENERATE}" ${args} --world-size 2 --quiet)
if(NOT rc EQUAL 0 OR NOT threads_out STREQUAL mpi_out)
  message(FATAL_ERROR "--world-size 2 (exit status ${rc}) printed '${threads_out}', mpirun -n 2 printed '${mpi_out}'\n${threads_err}")
endif()
message(STATUS "mpirun -n 2 and --world-size 2: ${mpi_out}")

# Shards of another world size: the 671B config (building it allocates nothing) next to a one-rank shard.
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}/mp1")
file(COPY_FILE "${CONFIGS}/config_671B_v3.2.json" "${WORK_DIR}/mp1/config.json")
file(TOUCH "${WORK_DIR}/mp1/model0-mp1.safetensors")
foreach(c "${GOLDEN}/tiny_bf16|n_heads \\(3\\) must be divisible by the world size \\(2\\)"
          "${GOLDEN}/tiny_fp8_ue8m0_yarn|wq_b.weight: each of the 2 ranks would hold 96 rows of this FP8 weight"
          "${WORK_DIR}/mp1|holds neither model0-mp2.safetensors.*it has model0-mp1.safetensors")
  string(REPLACE "|" ";" c "${c}")
  list(GET c 0 scenario)
  list(GET c 1 expected)
  run(rc out err ${mpirun} "${GENERATE}" --checkpoint "${scenario}" ${args})
  string(REGEX MATCHALL "dsv32-generate: dsv32 \\[" messages "${err}")
  list(LENGTH messages n)
  if(rc EQUAL 0 OR NOT err MATCHES "dsv32-generate: dsv32 \\[[a-z_]+\\]: rank 0 of 2 failed loading the model \\(rank 1 failed too\\): [^\n]*${expected}" OR NOT n EQUAL 1)
    message(FATAL_ERROR "mpirun -n 2 dsv32-generate --checkpoint ${scenario}: exit status ${rc}, ${n} message(s); expected a non-zero status and one message matching '${expected}'\n--- stderr:\n${err}")
  endif()
  message(STATUS "${scenario} over 2 ranks: refused on every rank, one message")
endforeach()
