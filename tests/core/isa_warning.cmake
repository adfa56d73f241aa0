# Runs PROGRAM (tests/core/isa_warning.cpp, compiled for less than this CPU) with two threads:
# meld's instruction-set warning must be on its stderr exactly once where the program says one is
# due (else never), also with MELD_NO_ISA_WARNING=0, and never with MELD_NO_ISA_WARNING=1.
# Invoked by CTest with -DPROGRAM=...
function(run_program var)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env MELD_NUM_THREADS=2 ${ARGN} ${PROGRAM}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${PROGRAM} failed (${rc}):\n${out}\n${err}")
  endif()
  # One warning per line that starts it (the message itself holds a ';', CMake's list separator).
  string(REGEX MATCHALL "meld: this program was compiled for" found "${err}")
  list(LENGTH found count)
  set(${var}_out "${out}" PARENT_SCOPE)
  set(${var}_err "${err}" PARENT_SCOPE)
  set(${var}_count ${count} PARENT_SCOPE)
endfunction()

run_program(plain)
run_program(zero MELD_NO_ISA_WARNING=0)
run_program(quiet MELD_NO_ISA_WARNING=1)
set(expected 0)
if(plain_out MATCHES "warning due: yes")
  set(expected 1)
elseif(NOT plain_out MATCHES "warning due: no")
  message(FATAL_ERROR "unexpected output:\n${plain_out}")
endif()
foreach(run plain zero)
  if(NOT ${run}_count EQUAL expected)
    message(FATAL_ERROR "expected ${expected} warning(s) (${run}), got ${${run}_count}:\n${${run}_err}")
  endif()
endforeach()
if(expected EQUAL 1 AND NOT plain_err MATCHES
   "meld: this program was compiled for [a-z0-9. ]+ but this CPU also runs [a-z0-9. ]+; compile with -march=native or link meld::native \\(MELD_NO_ISA_WARNING=1 silences this\\)\n")
  message(FATAL_ERROR "the warning does not read as expected:\n${plain_err}")
endif()
if(NOT quiet_count EQUAL 0)
  message(FATAL_ERROR "MELD_NO_ISA_WARNING=1 should silence the warning:\n${quiet_err}")
endif()
message(STATUS "${expected} warning(s) as expected: ${plain_err}")
