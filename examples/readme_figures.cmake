# The README's training figures, checked against what the commands print: the first command's
# accuracy (its quick start) and the MLP's 10-epoch accuracy (its Training table). A figure more
# than TOLERANCE (in units of 0.0001) from the run fails, naming both. Runs differ across machines
# in the last digits (floating-point summation order with the instruction set and thread count),
# hence the tolerance; the same machine, seed and thread count give the same bits. Run by CTest
# (readme_figures):
#   cmake -DREADME=<repo>/README.md -DEXAMPLE=<train_fashion_mnist> -DTOLERANCE=15 -P ...
cmake_minimum_required(VERSION 3.20)
file(READ ${README} readme)

include(${CMAKE_CURRENT_LIST_DIR}/accuracy.cmake)

set(failures)
# check(<what> <README figure> <arguments...>): runs the example, compares its accuracy.
function(check what figure)
  run_for_accuracy(measured ${EXAMPLE} ${ARGN})
  accuracy_difference(${figure} ${measured} diff)
  message(STATUS "${what}: README ${figure}, run ${measured}")
  if(diff GREATER TOLERANCE)
    list(JOIN ARGN " " command)
    set(failures "${failures}\n  ${what}: the README says ${figure}, `${command}` printed ${measured}"
        PARENT_SCOPE)
  endif()
endfunction()

# The quick start: "... build/release/examples/train_fashion_mnist <args>" and "it ends with
# `test_accuracy=<figure>".
if(NOT readme MATCHES "build/release/examples/train_fashion_mnist ([^\n`]*)\n")
  message(FATAL_ERROR "README: the quick start's training command was not found")
endif()
separate_arguments(quick_args UNIX_COMMAND "${CMAKE_MATCH_1}")
if(NOT readme MATCHES "it ends with `test_accuracy=([0-9.]+)")
  message(FATAL_ERROR "README: the quick start's accuracy was not found")
endif()
check("quick start" ${CMAKE_MATCH_1} ${quick_args})

# The Training table's MLP row: 1 worker x 2 threads, 10 epochs (the defaults otherwise).
if(NOT readme MATCHES "\\| MLP 784-256-128-10 \\| 1 x 2 \\| 10 \\| \\*\\*([0-9.]+)\\*\\*")
  message(FATAL_ERROR "README: the Training table's MLP row was not found")
endif()
check("Training table, MLP 10 epochs" ${CMAKE_MATCH_1} --model mlp --threads 2 --epochs 10)

if(failures)
  message(FATAL_ERROR "README figures differ from the runs:${failures}")
endif()
