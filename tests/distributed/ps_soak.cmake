# The parameter server's soak and stress run (see ps_soak.cpp), under mpirun with 3 processes:
#   cmake -DMPIRUN=... -DPROGRAM=... -DROUNDS=1000 -DINFLIGHT=100000 -P ps_soak.cmake
# 1. sync, stale:2 and async over ROUNDS rounds of keys of random shapes (async then with
#    INFLIGHT operations in flight at once): every worker's values equal its sequential reference.
# 2. A server killed (SIGKILL) a few rounds after a checkpoint; the job restarted from it: the
#    values equal the reference of a run without the fault.
function(run what expect_ok)
  execute_process(COMMAND ${MPIRUN} --oversubscribe -np 3 ${PROGRAM} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  message("--- ${what}: exit ${rc}\n${out}")
  if(expect_ok)
    string(REGEX MATCHALL "worker [0-9]+: final [0-9a-f]+ equals the reference" lines "${out}")
    list(LENGTH lines n)
    if(NOT rc EQUAL 0 OR NOT n EQUAL 2)
      message(FATAL_ERROR "${what}: expected both workers to equal the reference\n${err}")
    endif()
  endif()
  set(out "${out}" PARENT_SCOPE)
  set(rc "${rc}" PARENT_SCOPE)
endfunction()

foreach(mode sync stale:2)
  run("${mode}, ${ROUNDS} rounds" TRUE ${mode} ${ROUNDS})
endforeach()
run("async, ${ROUNDS} rounds, then ${INFLIGHT} pulls in flight" TRUE async ${ROUNDS}
    --inflight ${INFLIGHT})

set(ckpt "${CMAKE_CURRENT_BINARY_DIR}/ps_soak_checkpoint")
file(REMOVE "${ckpt}.server0")
run("a server killed after the checkpoint of round 40" FALSE sync 120 --save 40 ${ckpt} --die)
if(rc EQUAL 0 OR NOT out MATCHES "killing the server")
  message(FATAL_ERROR "the faulty run should have ended with the server killed")
endif()
run("restarted from the checkpoint" TRUE sync 120 --resume 40 ${ckpt})
file(REMOVE "${ckpt}.server0")
