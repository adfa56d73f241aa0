// meld: header-only C++20 tensors with fused expression templates, and parallelism.
// Including this header gives everything that is enabled in this build.
#pragma once

#include "essentials.hpp"  // tensors, expressions, the synchronous CPU backend

#include "backend/configuration.hpp"  // build_info, print_configuration
#include "backend/cpu/async.hpp"
#include "backend/device.hpp"
#include "backend/sim/executor.hpp"
#include "backend/sim/memory.hpp"
#include "backend/sim/sim.hpp"
#include "runtime/stream.hpp"

#include "nn/model.hpp"

#include "tensor/npy.hpp"    // save_npy, load_npy (<filesystem>, <fstream>)
#include "tensor/npz.hpp"    // save_npz, load_npz, npz_writer, npz_archive
#include "tensor/print.hpp"  // operator<< and to_string (<ostream>, <string>)

// The CUDA backend: in files compiled by nvcc (or against the emulated device of the tests), when
// the build enables it (MELD_ENABLE_CUDA; core/config.hpp).
#if defined(MELD_CUDA_BACKEND)
#include "backend/cuda/cuda.hpp"
#include "backend/cuda/executor.hpp"
#include "backend/cuda/stream.hpp"
#endif

// Distributed training (communicators, data_parallel, kv_store) is in <meld/distributed.hpp>: it
// adds about 1 s of parsing to every translation unit (threads, std::function, the ring
// algorithms), which programs that do not use it should not pay.
