// meld's distributed training: communicators (thread_comm always; mpi_comm and nccl_comm when
// the build enables them: MELD_ENABLE_MPI / MELD_ENABLE_NCCL, set by the meld::mpi / meld::nccl
// CMake targets), data_parallel, kv_store, param_server (with MPI). Includes meld.hpp.
#pragma once

#include "meld.hpp"

#include "distributed/buckets.hpp"
#include "distributed/comm_error.hpp"
#include "distributed/communicator.hpp"
#include "distributed/data_parallel.hpp"
#include "distributed/kv_store.hpp"
#include "distributed/ps_mode.hpp"
#include "distributed/sharded_optimizer.hpp"
#include "distributed/thread_comm.hpp"
#if defined(MELD_ENABLE_MPI)
#include "distributed/mpi_comm.hpp"
#include "distributed/param_server.hpp"
#endif
#if defined(MELD_ENABLE_NCCL)
#include "distributed/nccl_comm.hpp"
#endif
