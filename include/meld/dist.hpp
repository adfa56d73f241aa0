// meld's distributed training: communicators (thread_comm always; mpi_comm and nccl_comm when
// the build enables them: MELD_WITH_MPI / MELD_WITH_NCCL, set by the meld::mpi / meld::nccl
// CMake targets), data_parallel, kv_store. Includes meld.hpp.
#pragma once

#include "meld.hpp"

#include "dist/buckets.hpp"
#include "dist/comm_error.hpp"
#include "dist/communicator.hpp"
#include "dist/data_parallel.hpp"
#include "dist/kv_store.hpp"
#include "dist/thread_comm.hpp"
#if defined(MELD_WITH_MPI)
#include "dist/mpi_comm.hpp"
#endif
#if defined(MELD_WITH_NCCL)
#include "dist/nccl_comm.hpp"
#endif
