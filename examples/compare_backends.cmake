# Runs the training example's CPU build and another backend's build with the same arguments and
# requires the same test accuracy within TOLERANCE (both print `test_accuracy=<x> ...` last).
# Arguments: -DCPU=<binary> -DSIM=<binary> -DARGS=<list> -DTOLERANCE=<number, for messages>
#            -DTOLERANCE_TEN_THOUSANDTHS=<the same in units of 1e-4>
#            [-DLAUNCH=<list>: a launcher before each binary, e.g. mpirun -n 3]
foreach(which CPU SIM)
  execute_process(COMMAND ${LAUNCH} ${${which}} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${${which}} ${ARGS} failed (${rc}):\n${out}\n${err}")
  endif()
  if(NOT out MATCHES "\ntest_accuracy=([0-9.]+) samples_per_sec=([0-9.]+)\n$")
    message(FATAL_ERROR "${${which}}: no final test_accuracy line:\n${out}")
  endif()
  set(${which}_accuracy ${CMAKE_MATCH_1})
  set(${which}_rate ${CMAKE_MATCH_2})
  message(STATUS "${which}: test_accuracy=${CMAKE_MATCH_1} samples_per_sec=${CMAKE_MATCH_2}")
endforeach()
# Accuracies have four decimals: compare them in units of 1e-4.
function(ten_thousandths value out)
  string(REPLACE "." "" digits "${value}")
  string(REGEX REPLACE "^0+([0-9])" "\\1" digits "${digits}")
  set(${out} ${digits} PARENT_SCOPE)
endfunction()
ten_thousandths(${CPU_accuracy} cpu)
ten_thousandths(${SIM_accuracy} sim)
math(EXPR difference "${cpu} - ${sim}")
if(difference LESS 0)
  math(EXPR difference "0 - ${difference}")
endif()
math(EXPR allowed "${TOLERANCE_TEN_THOUSANDTHS}")
if(difference GREATER allowed)
  message(FATAL_ERROR "test accuracy ${SIM_accuracy} differs from the CPU's ${CPU_accuracy} by "
                      "more than ${TOLERANCE}")
endif()
message(STATUS "the accuracies agree within ${TOLERANCE} (difference ${difference}e-4)")
