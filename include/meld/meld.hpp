// meld: header-only C++20 tensors with fused expression templates, and parallelism.
// Including this header gives everything that is enabled in this build.
#pragma once

#include "version.hpp"

#include "core/broadcast.hpp"
#include "core/config.hpp"
#include "core/element_type.hpp"
#include "core/error.hpp"
#include "core/shape.hpp"

#include "expr/expression.hpp"
#include "expr/functors.hpp"
#include "expr/map.hpp"
#include "expr/matmul.hpp"
#include "expr/operators.hpp"
#include "expr/reduce.hpp"
#include "expr/walk.hpp"

#include "tensor/convert.hpp"
#include "tensor/factories.hpp"
#include "tensor/random.hpp"
#include "tensor/tensor.hpp"
#include "tensor/tensor_view.hpp"

#include "backend/concept.hpp"
#include "backend/cpu/async.hpp"
#include "backend/cpu/cpu.hpp"
#include "backend/cpu/executor.hpp"
#include "backend/cpu/stream.hpp"
#include "backend/cpu/thread_pool.hpp"
#include "backend/device.hpp"
#include "backend/policy.hpp"
#include "backend/sim/executor.hpp"
#include "backend/sim/memory.hpp"
#include "backend/sim/sim.hpp"

#include "nn/model.hpp"

// The CUDA backend: in files compiled by nvcc, when the build enables it (MELD_ENABLE_CUDA).
#if defined(MELD_ENABLE_CUDA) && defined(__CUDACC__)
#include "backend/cuda/cuda.hpp"
#include "backend/cuda/executor.hpp"
#include "backend/cuda/half.hpp"
#include "backend/cuda/stream.hpp"
#endif

// Distributed training (communicators, data_parallel, kv_store) is in <meld/dist.hpp>: it adds
// about 1 s of parsing to every translation unit (threads, std::function, the ring algorithms),
// which programs that do not use it should not pay.
