// meld's essentials: tensors, expressions and the synchronous CPU backend, for programs that need
// no more. <meld/meld.hpp> is this and everything else (asynchronous CPU streams, the simulated
// device, nn, CUDA under nvcc); this header leaves those out, and with them about a sixth of the
// parsing that every translation unit pays (threads' queues and futures, the device, the layers).
#pragma once

#include "version.hpp"

#include "core/broadcast.hpp"
#include "core/config.hpp"
#include "core/element_type.hpp"
#include "core/error.hpp"
#include "core/shape.hpp"
#include "core/trace.hpp"

#include "expr/expression.hpp"
#include "expr/functors.hpp"
#include "expr/map.hpp"
#include "expr/matmul.hpp"
#include "expr/operators.hpp"
#include "expr/reduce.hpp"
#include "expr/walk.hpp"

#include "tensor/assign_each.hpp"
#include "tensor/convert.hpp"
#include "tensor/factories.hpp"
#include "tensor/from_data.hpp"
#include "tensor/indexing.hpp"
#include "tensor/join.hpp"
#include "tensor/random.hpp"
#include "tensor/scan_sort.hpp"
#include "tensor/statistics.hpp"
#include "tensor/tensor.hpp"
#include "tensor/tensor_view.hpp"

#include "backend/concept.hpp"
#include "backend/cpu/cpu.hpp"
#include "backend/cpu/executor.hpp"
#include "backend/policy.hpp"
#include "runtime/thread_pool.hpp"
