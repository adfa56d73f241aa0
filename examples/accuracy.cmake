# Helpers of the cmake -P scripts that check the training example's accuracy
# (compare_backends.cmake, readme_figures.cmake).

# run_for_accuracy(<var> <command...>): runs the command, which must succeed and end with the
# example's line `test_accuracy=<x> samples_per_sec=<y>`; sets <var> to x. Stops the script with
# the output otherwise.
function(run_for_accuracy var)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  list(JOIN ARGN " " command)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${command} failed (${rc}):\n${out}\n${err}")
  endif()
  if(NOT out MATCHES "test_accuracy=([0-9.]+) samples_per_sec=([0-9.]+)\n*$")
    message(FATAL_ERROR "${command}: no final test_accuracy line:\n${out}")
  endif()
  message(STATUS "${command}: test_accuracy=${CMAKE_MATCH_1} samples_per_sec=${CMAKE_MATCH_2}")
  set(${var} ${CMAKE_MATCH_1} PARENT_SCOPE)
endfunction()

# accuracy_difference(<a> <b> <var>): |a - b| in units of 1e-4, for accuracies 0.xxxx or 1.xxxx
# of up to four decimals (CMake's math is integer only).
function(accuracy_difference a b var)
  foreach(which a b)
    if(NOT "${${which}}" MATCHES "^([01])\\.([0-9]+)$")
      message(FATAL_ERROR "not an accuracy: '${${which}}'")
    endif()
    string(SUBSTRING "${CMAKE_MATCH_2}0000" 0 4 digits)
    math(EXPR ${which}_units "${CMAKE_MATCH_1} * 10000 + 1${digits} - 10000")
  endforeach()
  math(EXPR difference "${a_units} - ${b_units}")
  if(difference LESS 0)
    math(EXPR difference "0 - ${difference}")
  endif()
  set(${var} ${difference} PARENT_SCOPE)
endfunction()
