# A process killed with SIGKILL in the middle of a job (see mpi_sigkill.cpp).
#   cmake -DMPIRUN=... -DPROGRAM=... -DRANKS=3 -DTIMEOUT=2 -P mpi_sigkill.cmake
#
# 1. With `mpirun --enable-recovery` the survivors keep running: each must print a comm_error
#    naming rank 1 as missing, within twice the timeout.
# 2. Without it, Open MPI 4.1's mpirun ends the whole job when a process dies: mpirun must exit
#    with an error naming the killed rank, well before the survivors' timeout.
set(survivors 0)
math(EXPR survivors "${RANKS} - 1")

string(TIMESTAMP t0 "%s")
execute_process(
  COMMAND ${MPIRUN} --oversubscribe --enable-recovery -np ${RANKS} ${PROGRAM} ${TIMEOUT}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
string(TIMESTAMP t1 "%s")
message("--- with --enable-recovery (${rc}, about ${t0}..${t1} s):\n${out}")
string(REGEX MATCHALL "rank [0-9]+: comm_error after [0-9.]+ s: [^\n]*" lines "${out}")
list(LENGTH lines n)
if(NOT n EQUAL survivors)
  message(FATAL_ERROR "expected ${survivors} comm_error lines, got ${n}\n${out}\n${err}")
endif()
math(EXPR limit_ms "${TIMEOUT} * 2000")
foreach(line IN LISTS lines)
  string(REGEX MATCH "after ([0-9]+)\\.([0-9]+) s" _ "${line}")
  math(EXPR ms "${CMAKE_MATCH_1} * 1000 + ${CMAKE_MATCH_2}")
  if(ms GREATER limit_ms)
    message(FATAL_ERROR "reported after ${ms} ms, more than twice the timeout: ${line}")
  endif()
  if(NOT line MATCHES "rank 1 never arrived")
    message(FATAL_ERROR "the dead rank is not named: ${line}")
  endif()
  if(NOT line MATCHES "allreduce #2")
    message(FATAL_ERROR "the pending collective is not named: ${line}")
  endif()
endforeach()

string(TIMESTAMP t0 "%s")
execute_process(
  COMMAND ${MPIRUN} --oversubscribe -np ${RANKS} ${PROGRAM} 600
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
string(TIMESTAMP t1 "%s")
math(EXPR took "${t1} - ${t0}")
message("--- without (${rc}, ${took} s):\n${out}${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "mpirun succeeded although a process was killed")
endif()
if(NOT "${out}${err}" MATCHES "rank 1 .*signal 9")
  message(FATAL_ERROR "mpirun did not name the killed rank")
endif()
if(took GREATER 60)
  message(FATAL_ERROR "mpirun took ${took} s to end the job")
endif()
