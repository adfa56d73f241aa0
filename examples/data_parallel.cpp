// Data-parallel training in a few lines: the same loop on k threads of one process, or on k
// processes under mpirun. (The README's "Distributed training" section; a small MLP on a
// synthetic problem, so that it runs anywhere in a second.)
//
//   data_parallel [--workers K]                 K threads (thread_comm), default 2
//   mpirun -np K data_parallel --backend mpi    K processes (mpi_comm; needs MELD_ENABLE_MPI)
#include <cstdio>
#include <cstdlib>
#include <string>

#include <meld/distributed.hpp>

#include "../tests/distributed/toy_models.hpp"

// One training loop for every backend: only the data_parallel's type differs.
template <class DP, class Model>
double train(DP& dp, Model& model, int steps) {
  const meld::tensor<float> w = meld::uniform<float>({16, 4}, -1.f, 1.f, 3);  // the target map
  double loss = 0;
  for (int s = 0; s < steps; ++s) {
    // Every rank draws the same global batch; step() keeps this rank's shard.
    const meld::tensor<float> x =
        meld::uniform<float>({64, 16}, -1.f, 1.f, 100 + static_cast<std::uint64_t>(s));
    const meld::tensor<float> y = meld::matmul(x, w);
    loss = dp.step(x, y, toy::mse{});  // shard, forward, backward, allreduce
    toy::sgd(model, 0.2f);             // the optimizer updates this replica
  }
  return loss;
}

int main(int argc, char** argv) {
  int workers = 2;
  std::string backend = "threads";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--workers") workers = std::atoi(argv[i + 1]);
    if (a == "--backend") backend = argv[i + 1];
  }
  toy::mlp<float> model({16, 32, 4}, /*seed=*/1);
  double first = 0, last = 0;
  if (backend == "threads") {
    meld::thread_group group(workers);     // K ranks: threads of this process
    meld::data_parallel dp(model, group);  // rank 0 trains `model`, the rest replicas
    first = train(dp, model, 1);
    last = train(dp, model, 200);
  } else if (backend == "mpi") {
#if defined(MELD_ENABLE_MPI)
    meld::mpi_session mpi(argc, argv);
    meld::mpi_comm comm;                  // MPI_COMM_WORLD: one rank per process
    meld::data_parallel dp(model, comm);  // broadcasts rank 0's parameters
    first = train(dp, model, 1);
    last = train(dp, model, 200);
    workers = comm.size();
    if (comm.rank() != 0) return 0;
#else
    std::fprintf(stderr, "built without MPI (MELD_ENABLE_MPI=ON)\n");
    return 1;
#endif
  }
  std::printf("workers=%d first_loss=%.4f last_loss=%.4f\n", workers, first, last);
  return last < 0.1 * first ? 0 : 1;  // it learned
}
