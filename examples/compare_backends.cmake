# Runs the training example's CPU build and another backend's build with the same arguments and
# requires the same test accuracy within TOLERANCE (both print `test_accuracy=<x> ...` last).
# Arguments: -DCPU=<binary> -DSIM=<binary> -DARGS=<list> -DTOLERANCE=<number, for messages>
#            -DTOLERANCE_TEN_THOUSANDTHS=<the same in units of 1e-4>
#            [-DLAUNCH=<list>: a launcher before each binary, e.g. mpirun -n 3]
include(${CMAKE_CURRENT_LIST_DIR}/accuracy.cmake)
foreach(which CPU SIM)
  run_for_accuracy(${which}_accuracy ${LAUNCH} ${${which}} ${ARGS})
endforeach()
accuracy_difference(${CPU_accuracy} ${SIM_accuracy} difference)
math(EXPR allowed "${TOLERANCE_TEN_THOUSANDTHS}")
if(difference GREATER allowed)
  message(FATAL_ERROR "test accuracy ${SIM_accuracy} differs from the CPU's ${CPU_accuracy} by "
                      "more than ${TOLERANCE}")
endif()
message(STATUS "the accuracies agree within ${TOLERANCE} (difference ${difference}e-4)")
