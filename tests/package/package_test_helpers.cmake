# Helpers for the package tests' cmake -P scripts.

# run(command...): runs it, stops the test with its output if it fails.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

# run_output(var command...): runs it, sets var to its standard output (stripped).
function(run_output var)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(${var} "${out}" PARENT_SCOPE)
endfunction()

# expect_failure(regex command...): the command must fail, and its output must match regex.
function(expect_failure regex)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REGEX REPLACE "[ \t\r\n]+" " " all "${out} ${err}")  # messages wrap lines
  if(rc EQUAL 0)
    message(FATAL_ERROR "expected a failure, but it succeeded: ${ARGN}\n${out}\n${err}")
  endif()
  if(NOT all MATCHES "${regex}")
    message(FATAL_ERROR "failed, but without the expected message (${regex}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "failed as expected: ${regex}")
endfunction()
