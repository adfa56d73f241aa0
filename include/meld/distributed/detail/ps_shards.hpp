// What one parameter-server server keeps per key (its rows of the value, the update rule's state,
// the rounds being summed, the pulls waiting for them), and the file a checkpoint writes of it.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <list>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "../../io/checkpoint_file.hpp"
#include "ps_protocol.hpp"

namespace meld::detail::ps {

// The sum of the workers' pushes of one round, over the rows they touched.
template <class T>
struct round_sum {
  std::vector<T> sum;
  std::vector<std::uint8_t> touched;  // per row of the shard
  int count = 0;
};

// A pull that may not see the value yet.
struct waiting_pull {
  message request;  // kept: the sparse form carries its rows
  clock::time_point since;
};

// One key's rows on one server.
template <class T>
struct shard {
  layout where;
  bool ready = false;  // worker 0's init has arrived (or a checkpoint was restored)
  index_t row_begin = 0, rows = 0;
  std::vector<T> value, state;
  std::uint64_t applied = 0;          // rounds applied (sync, stale) or pushes (async)
  std::uint64_t steps = 0;            // updates applied, across restarts (the rule's step)
  std::vector<std::uint64_t> pushed;  // per worker: the last round received
  std::map<std::uint64_t, round_sum<T>> open;
  std::list<waiting_pull> waiting;
  std::vector<message> deferred;  // arrived before the key's init
  clock::time_point first_deferred;
  index_t elements() const { return rows * where.cols; }
};

// Which server a checkpoint file belongs to: a file is restored only by the same server of the
// same number of servers, with a rule of the same number of state arrays.
struct shard_file_owner {
  int servers = 1, index = 0, workers = 1, state_slots = 0;
};

// One file per server, in meld's checkpoint format (io/checkpoint_file.hpp: atomic, synced,
// checksummed, little-endian): an int64 entry "server" {servers, index, state slots}, and per
// key k entries "k.layout" (int64 {rows, cols, home, row_begin, rows here, updates}), "k.value"
// and "k.state" (the rule's state arrays, one after the other). Keys not yet initialized are
// left out.
template <class T>
void save_shards(const std::string& path, const std::map<int, shard<T>>& shards,
                 const shard_file_owner& owner) {
  namespace ckpt = ::meld::detail::ckpt;
  std::vector<ckpt::record> records;
  // A rank-1 entry of n elements of type E at data.
  auto add = [&]<class E>(std::string name, const E* data, std::size_t n) {
    records.push_back({ckpt::kind::shard,
                       std::move(name),
                       element_code<E>(),
                       {static_cast<index_t>(n)},
                       data,
                       n});
  };
  const std::int64_t server[3] = {owner.servers, owner.index, owner.state_slots};
  add("server", server, 3);
  std::vector<std::array<std::int64_t, 6>> layouts;
  layouts.reserve(shards.size());  // the records point into it
  for (const auto& [key, s] : shards) {
    if (!s.ready) continue;
    layouts.push_back({s.where.rows, s.where.cols, s.where.home, s.row_begin, s.rows,
                       static_cast<std::int64_t>(s.steps)});
    const std::string k = std::to_string(key);
    add(k + ".layout", layouts.back().data(), 6);
    add(k + ".value", s.value.data(), s.value.size());
    add(k + ".state", s.state.data(), s.state.size());
  }
  ckpt::write_file(path, ckpt::encode(element_code<T>(), records));
}

// Every key of the file, or a checkpoint_error starting with `who`: the file is checked whole
// (checksum, sizes, and each key's entries against its layout) before any shard is made.
template <class T>
std::map<int, shard<T>> load_shards(const std::string& path, const shard_file_owner& owner,
                                    const std::string& who) {
  namespace ckpt = ::meld::detail::ckpt;
  auto bad = [&](const std::string& what) {
    return checkpoint_error(cat(who, ": the checkpoint '", path, "' ", what));
  };
  if (!std::filesystem::exists(path))
    throw checkpoint_error(cat(who, ": cannot read the checkpoint '", path, "': no such file"));
  const ckpt::checked_file f = [&] {
    try {
      return ckpt::decode(path);
    } catch (const checkpoint_error& e) {
      throw checkpoint_error(cat(who, ": ", e.what()));
    }
  }();
  if (f.type != element_code<T>())
    throw bad(cat("holds ", element_code_name(f.type), " values, the server keeps ",
                  element_code_name(element_code<T>())));
  auto ints = [&](const std::string& name, std::size_t n) {
    const ckpt::entry* e = f.find(ckpt::kind::shard, name);
    if (!e || e->type != element_code<std::int64_t>() ||
        e->shape != shape_t{static_cast<index_t>(n)})
      throw bad(
          cat("has no entry '", name, "' of ", n, " int64 values (not a server checkpoint?)"));
    std::vector<std::int64_t> v(n);
    f.copy(*e, v.data());
    return v;
  };
  const auto head = ints("server", 3);
  if (head[0] != owner.servers || head[1] != owner.index || head[2] != owner.state_slots)
    throw bad(cat("is for server ", head[1], " of ", head[0], " with ", head[2],
                  " state slots, not server ", owner.index, " of ", owner.servers, " with ",
                  owner.state_slots));
  std::map<int, shard<T>> restored;
  for (const ckpt::entry& e : f.entries) {
    const auto dot = e.name.find(".layout");
    if (e.k != ckpt::kind::shard || dot == std::string::npos || dot + 7 != e.name.size()) continue;
    const std::string k = e.name.substr(0, dot);
    int key = -1;
    if (k.empty() || k.size() > 9 || k.find_first_not_of("0123456789") != std::string::npos ||
        (key = std::stoi(k)) < 0)
      throw bad(cat("has an entry '", e.name, "' of no key"));
    const auto l = ints(e.name, 6);
    const layout where{l[0], l[1], owner.servers, static_cast<int>(l[2])};
    if (l[0] < 1 || l[1] < 1 || l[0] > (std::int64_t(1) << 48) / l[1] || l[2] < -1 ||
        l[2] >= owner.servers || l[3] != where.begin(owner.index) ||
        l[4] != where.end(owner.index) - l[3] || l[5] < 0)
      throw bad(cat("has key ", key, " with an impossible layout"));
    shard<T>& s = restored[key];
    s.where = where;
    s.row_begin = l[3];
    s.rows = l[4];
    s.steps = static_cast<std::uint64_t>(l[5]);
    const auto n = static_cast<std::size_t>(s.elements());
    const auto slots = static_cast<std::size_t>(owner.state_slots);
    for (auto [what, into, count] :
         {std::tuple{".value", &s.value, n}, std::tuple{".state", &s.state, n * slots}}) {
      const ckpt::entry* d = f.find(ckpt::kind::shard, k + what);
      if (!d || d->type != element_code<T>() || d->shape != shape_t{static_cast<index_t>(count)})
        throw bad(cat("has no entry '", k, what, "' of ", count, " ",
                      element_code_name(element_code<T>()), " values for key ", key));
      into->resize(count);
      f.copy(*d, into->data());
    }
    s.pushed.assign(static_cast<std::size_t>(owner.workers), 0);
    s.ready = true;
  }
  return restored;
}

}  // namespace meld::detail::ps
