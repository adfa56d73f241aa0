// nccl_comm on the GPUs this machine has (a one-rank communicator on one GPU): collectives,
// asynchronous requests, debug mode, the host bootstrap, a destructor that returns. Without a
// GPU it only proves that the code compiles and links, and reports "skipped" (exit code 77).
#include <cstdio>
#include <numeric>
#include <span>
#include <vector>

#include <meld/distributed/nccl_comm.hpp>
#include <meld/distributed/thread_comm.hpp>

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
  std::printf("%s: %s\n", ok ? "ok  " : "FAIL", what);
  failures += ok ? 0 : 1;
}

template <class T>
struct device_buffer {
  explicit device_buffer(std::size_t n) : n(n) { cudaMalloc(&p, n * sizeof(T) + 1); }
  ~device_buffer() { cudaFree(p); }
  void put(const std::vector<T>& v) {
    cudaMemcpy(p, v.data(), n * sizeof(T), cudaMemcpyHostToDevice);
  }
  std::vector<T> get() const {
    std::vector<T> v(n);
    cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return v;
  }
  std::span<T> span() { return {p, n}; }
  T* p = nullptr;
  std::size_t n;
};

}  // namespace

static_assert(meld::communicator<meld::nccl_comm>);

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: nccl_comm compiled and linked; runtime checks skipped\n");
    return 77;
  }
  meld::comm_options o;
  o.debug = true;
  o.timeout = std::chrono::seconds(60);
  {
    auto comm = meld::nccl_comm::single(0, nullptr, o);
    expect(comm->size() == 1 && comm->rank() == 0, "one rank");
    const std::size_t n = 1 << 20;
    std::vector<float> host(n);
    std::iota(host.begin(), host.end(), 0.f);
    device_buffer<float> a(n), b(n);
    a.put(host);
    comm->allreduce(a.span());
    expect(a.get() == host, "allreduce over one rank leaves the buffer");
    auto r = comm->allreduce_async(a.span(), meld::reduce_op::max);
    r.wait();
    expect(r.ready() && a.get() == host, "asynchronous allreduce");
    comm->broadcast(a.span(), 0);
    comm->allgather(std::span<const float>(a.p, n), b.span());
    expect(b.get() == host, "allgather");
    comm->reduce_scatter(std::span<const float>(a.p, n), b.span());
    expect(b.get() == host, "reduce_scatter");
    comm->barrier();
    expect(comm->next_sequence() == 7, "sequence numbers");
    bool threw = false;
    try {
      comm->broadcast(a.span(), 1);
    } catch (const std::invalid_argument&) {
      threw = true;
    }
    expect(threw, "a root outside the communicator is refused");
  }
  {
    // Bootstrapped over a host communicator (a one-rank thread group here; mpi_comm in jobs).
    meld::thread_group host(1);
    meld::nccl_comm comm(host.comm(0), 0, nullptr, o);
    device_buffer<double> d(1000);
    d.put(std::vector<double>(1000, 2.0));
    comm.allreduce(d.span());
    expect(d.get() == std::vector<double>(1000, 2.0), "bootstrapped over a host communicator");
  }
  std::printf("%d failures\n", failures);
  return failures ? 1 : 0;
}
