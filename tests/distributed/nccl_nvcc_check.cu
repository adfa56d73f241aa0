// nccl_comm.hpp compiled by nvcc (the CUDA backend's translation units include it).
#include <meld/distributed/nccl_comm.hpp>

static_assert(meld::communicator<meld::nccl_comm>);

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return 77;
  auto comm = meld::nccl_comm::single(0);
  float* p = nullptr;
  cudaMalloc(&p, 64 * sizeof(float));
  comm->allreduce(std::span<float>(p, 64));
  cudaFree(p);
  return 0;
}
