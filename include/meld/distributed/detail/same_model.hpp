// The check data_parallel makes at construction: every rank must hold the same model (parameter
// and buffer names, types and shapes) and the same bucket cap, or the collective schedule would
// differ between ranks. Ranks compare a hash of a one-line-per-entry description; when they
// differ, rank 0's description is broadcast and each rank names its first difference from it.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "../../core/error.hpp"
#include "../../tensor/convert.hpp"
#include "../../tensor/tensor.hpp"
#include "../buffer.hpp"
#include "../communicator.hpp"

namespace meld::detail::distributed {

inline std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t a = 0;
  for (std::size_t b; (b = s.find(sep, a)) != std::string::npos; a = b + 1)
    out.push_back(s.substr(a, b - a));
  if (a < s.size()) out.push_back(s.substr(a));
  return out;
}

// What must be equal on every rank: the parameters and buffers (names, types, shapes) and the
// bucket cap. One entry per line.
template <class Model>
std::string describe_model(Model& m, std::size_t bucket_bytes) {
  using value_type = typename Model::value_type;
  using tensor_type = tensor<value_type, typename Model::backend_type>;
  std::string d = cat("bucket cap ", bucket_bytes, " bytes\n");
  m.visit_parameters([&](std::string_view name, tensor_type& p, tensor_type& g) {
    if (!(g.shape() == p.shape()))
      throw shape_error(cat("data_parallel: parameter '", name, "' has shape ", p.shape(),
                            " but its gradient has shape ", g.shape()));
    d += cat("parameter '", name, "' ", type_name<value_type>(), " ", p.shape(), "\n");
  });
  m.visit_buffers([&](std::string_view name, tensor_type& b) {
    d += cat("buffer '", name, "' ", type_name<value_type>(), " ", b.shape(), "\n");
  });
  return d;
}

// A collective on host numbers with any communicator: in place for a host communicator; through
// a tensor on backend B (copied there and back) for a device communicator, which moves device
// memory only. For the checks and counts that are not on a step's path.
template <class B, class Comm, class F>
void on_host_numbers(Comm& c, std::vector<std::int64_t>& numbers, F&& collective) {
  if constexpr (Comm::memory_kind == comm_memory::host) {
    collective(c, numbers);
  } else {
    tensor<std::int64_t> host({static_cast<index_t>(numbers.size())}, uninitialized);
    std::memcpy(host.data(), numbers.data(), numbers.size() * sizeof(std::int64_t));
    tensor<std::int64_t, B> device = meld::to<B>(host);
    collective(c, device);
    host = meld::to<cpu<>>(device);
    std::memcpy(numbers.data(), host.data(), numbers.size() * sizeof(std::int64_t));
  }
}

// Throws shape_error on every rank if the ranks' models (or bucket caps) differ (collective).
template <class Comm, class Model>
void check_same_model(Comm& c, Model& model, std::size_t bucket_bytes) {
  using B = typename Model::backend_type;
  const std::string mine = describe_model(model, bucket_bytes);
  // Every rank's hash: an allgather done as an allreduce of one slot per rank (so that a device
  // communicator needs one buffer, in place).
  std::vector<std::int64_t> all(static_cast<std::size_t>(c.size()), 0);
  all[static_cast<std::size_t>(c.rank())] = static_cast<std::int64_t>(fnv1a(mine));
  on_host_numbers<B>(c, all, [](Comm& cc, auto& buf) { cc.allreduce(buf, reduce_op::sum); });
  std::vector<int> differ;
  for (int r = 0; r < c.size(); ++r)
    if (all[static_cast<std::size_t>(r)] != all[0]) differ.push_back(r);
  if (differ.empty()) return;
  std::vector<std::int64_t> length{static_cast<std::int64_t>(mine.size())};
  on_host_numbers<B>(c, length, [](Comm& cc, auto& buf) { cc.broadcast(buf, 0); });
  std::vector<std::int64_t> words(static_cast<std::size_t>((length[0] + 7) / 8));
  if (c.rank() == 0) std::memcpy(words.data(), mine.data(), mine.size());
  on_host_numbers<B>(c, words, [](Comm& cc, auto& buf) { cc.broadcast(buf, 0); });
  const std::string theirs(reinterpret_cast<const char*>(words.data()),
                           static_cast<std::size_t>(length[0]));
  std::string msg = cat("data_parallel: the ranks hold different models (", ranks_str(differ),
                        differ.size() == 1 ? " differs" : " differ", " from rank 0's)");
  if (mine != theirs) {
    const auto a = split(theirs, '\n'), b = split(mine, '\n');
    std::size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    msg += cat(": rank 0 has ", a.size() - 1, " parameters and buffers, rank ", c.rank(), " has ",
               b.size() - 1, "; the first difference: rank 0 has ", i < a.size() ? a[i] : "nothing",
               ", rank ", c.rank(), " has ", i < b.size() ? b[i] : "nothing");
  } else {
    msg += "; each of them names its first difference";
  }
  // Every rank throws, and data_parallel then fails the group: first let every rank finish the
  // broadcasts (a rank still forwarding rank 0's description would otherwise see the abort and
  // fail with comm_error instead). Past a barrier that one rank has left, every rank's arrival is
  // published, so no rank's barrier can fail.
  c.barrier();
  throw shape_error(msg);
}

}  // namespace meld::detail::distributed
