// Checkpoints: a model's parameters and buffers, and optionally an optimizer's state, in a
// versioned binary file.
//
//   nn::save_checkpoint("model.ckpt", model);          nn::load_checkpoint("model.ckpt", model);
//   nn::save_checkpoint("run.ckpt", model, optimizer);  nn::load_checkpoint("run.ckpt", model,
//   optimizer);
//
// Loading checks everything before it changes anything: besides what every checkpoint file is
// checked for (io/checkpoint_file.hpp: missing, truncated, corrupted, another version), another
// element type, or names and shapes that differ from the model's throw nn::checkpoint_error
// with a message naming the file and what is wrong, and leave the model and the optimizer
// unchanged. Saving is atomic and durable (see io/checkpoint_file.hpp).
//
// Entries: the model's parameters (kind 1) and buffers (kind 2) under their names, the
// optimizer's state (kind 3); optimizer counters (steps) are int64 entries of rank 0.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../io/checkpoint_file.hpp"
#include "../tensor/convert.hpp"
#include "layer.hpp"
#include "optim/optimizer.hpp"
#include "require_model.hpp"

namespace meld::nn {

/// \addtogroup nn
/// @{

/// A checkpoint that cannot be saved or loaded; the message names the file and what is wrong.
using checkpoint_error = meld::checkpoint_error;

namespace detail::ckpt {

using namespace ::meld::detail::ckpt;

// Something of the model or optimizer that a checkpoint holds, staged in host memory: tensors
// (of any backend) go through explicit host copies, made by meld::to when saving, and written
// back by commit() once a load has checked everything.
struct slot {
  kind k;
  std::string name;
  std::uint32_t type;
  shape_t shape;
  void* data;         // host memory: the staging copy, or a host value (a step counter)
  std::size_t count;  // elements
  std::shared_ptr<void> staging;
  std::function<void()> commit;  // load: from the staging copy into the tensor
};

enum class staging { save, load };

template <class X>
slot tensor_slot(kind k, std::string_view name, X& t, staging mode) {
  using T = typename X::value_type;
  using B = typename X::backend_type;
  auto host = std::make_shared<tensor<T, cpu<>>>(
      mode == staging::save ? to<cpu<>>(t) : tensor<T, cpu<>>(t.shape(), uninitialized));
  slot s{k,
         std::string(name),
         element_code<T>(),
         t.shape(),
         host->data(),
         static_cast<std::size_t>(t.size()),
         host,
         {}};
  if (mode == staging::load)
    s.commit = [&t, host] {
      if (t.size()) executor<B>::copy_from_host(t, static_cast<const T*>(host->data()));
    };
  return s;
}

// The slots of a model (and optimizer), in visiting order.
template <class M>
void model_slots(M& model, std::vector<slot>& out, staging mode) {
  model.visit_parameters([&](std::string_view name, auto& p, auto&) {
    out.push_back(tensor_slot(kind::parameter, name, p, mode));
  });
  model.visit_buffers([&](std::string_view name, auto& b) {
    out.push_back(tensor_slot(kind::buffer, name, b, mode));
  });
}

template <class O>
void optimizer_slots(O& opt, std::vector<slot>& out, staging mode) {
  opt.visit_state([&](std::string_view name, auto& s) {
    using S = std::remove_cvref_t<decltype(s)>;
    if constexpr (std::is_same_v<S, std::int64_t>) {
      out.push_back({kind::optimizer,
                     std::string(name),
                     element_code<std::int64_t>(),
                     shape_t{},
                     &s,
                     1,
                     nullptr,
                     {}});
    } else {
      out.push_back(tensor_slot(kind::optimizer, name, s, mode));
    }
  });
}

inline void check_unique(const std::vector<slot>& slots) {
  for (std::size_t i = 0; i < slots.size(); ++i)
    for (std::size_t j = i + 1; j < slots.size(); ++j)
      if (slots[i].k == slots[j].k && slots[i].name == slots[j].name)
        throw checkpoint_error(cat("checkpoint: the model has two ", kind_name(slots[i].k),
                                   "s named '", slots[i].name, "'"));
}

inline void save(const std::filesystem::path& path, std::uint32_t element_type,
                 const std::vector<slot>& slots) {
  check_unique(slots);
  std::vector<record> records;
  records.reserve(slots.size());
  for (const slot& s : slots) records.push_back({s.k, s.name, s.type, s.shape, s.data, s.count});
  write_file(path, encode(element_type, records));
}

// Reads and validates a checkpoint, then fills `slots` from it; nothing is written into them
// unless every check passes. Without with_optimizer, optimizer entries are ignored (a model alone
// can be loaded from a checkpoint that also holds optimizer state).
inline void load(const std::filesystem::path& path, std::uint32_t element_type,
                 const std::vector<slot>& slots, bool with_optimizer) {
  check_unique(slots);
  const checked_file f = decode(path);
  const std::string& file = f.file;
  if (f.type != element_type)
    throw checkpoint_error(cat("checkpoint '", file, "' holds ", element_code_name(f.type),
                               " values, the model has ", element_code_name(element_type)));
  // Match entries and slots, both ways, before writing anything.
  std::vector<const entry*> source(slots.size(), nullptr);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const slot& s = slots[i];
    const entry* e = source[i] = f.find(s.k, s.name);
    if (!e)
      throw checkpoint_error(
          cat("checkpoint '", file, "' has no ", kind_name(s.k), " '", s.name, "'",
              s.k == kind::optimizer ? " (another kind of optimizer?)" : " (another model?)"));
    if (e->type != s.type)
      throw checkpoint_error(cat("checkpoint '", file, "': ", kind_name(s.k), " '", s.name,
                                 "' holds ", element_code_name(e->type), ", expected ",
                                 element_code_name(s.type)));
    if (!(e->shape == s.shape))
      throw checkpoint_error(cat("checkpoint '", file, "': ", kind_name(s.k), " '", s.name,
                                 "' has shape ", e->shape, ", the model has ", s.shape));
  }
  for (const entry& e : f.entries) {
    if (e.k == kind::optimizer && !with_optimizer) continue;
    bool known = false;
    for (const slot& s : slots) known = known || (e.k == s.k && e.name == s.name);
    if (!known)
      throw checkpoint_error(cat("checkpoint '", file, "' has ", kind_name(e.k), " '", e.name,
                                 "', which the ", e.k == kind::optimizer ? "optimizer" : "model",
                                 " does not have (another model?)"));
  }

  // Every check passed: copy into the staging copies, then into the tensors.
  for (std::size_t i = 0; i < slots.size(); ++i) f.copy(*source[i], slots[i].data);
  for (const slot& s : slots)
    if (s.commit) s.commit();
}

}  // namespace detail::ckpt

/// Saves the model's parameters and buffers to path (see the format above). Throws
/// checkpoint_error when the file cannot be written.
template <class M>
void save_checkpoint(const std::filesystem::path& path, M& model) {
  static_assert(require_model<M>(), "meld::nn::save_checkpoint: see the messages above");
  std::vector<detail::ckpt::slot> slots;
  detail::ckpt::model_slots(model, slots, detail::ckpt::staging::save);
  detail::ckpt::save(path, element_code<typename M::value_type>(), slots);
}

/// Saves the model's parameters and buffers and the optimizer's state to path.
template <class M, class O>
void save_checkpoint(const std::filesystem::path& path, M& model, O& optimizer) {
  static_assert(require_model<M>(), "meld::nn::save_checkpoint: see the messages above");
  static_assert(optim::optimizer<O>,
                "meld::nn::save_checkpoint: the third argument must satisfy meld::optim::optimizer "
                "(step(), zero_grad(), visit_state(f), model_type)");
  std::vector<detail::ckpt::slot> slots;
  detail::ckpt::model_slots(model, slots, detail::ckpt::staging::save);
  detail::ckpt::optimizer_slots(optimizer, slots, detail::ckpt::staging::save);
  detail::ckpt::save(path, element_code<typename M::value_type>(), slots);
}

/// Loads parameters and buffers; optimizer state in the file is ignored.
template <class M>
void load_checkpoint(const std::filesystem::path& path, M& model) {
  static_assert(require_model<M>(), "meld::nn::load_checkpoint: see the messages above");
  std::vector<detail::ckpt::slot> slots;
  detail::ckpt::model_slots(model, slots, detail::ckpt::staging::load);
  detail::ckpt::load(path, element_code<typename M::value_type>(), slots, false);
}

/// Loads parameters, buffers and the optimizer's state (all or nothing).
template <class M, class O>
void load_checkpoint(const std::filesystem::path& path, M& model, O& optimizer) {
  static_assert(require_model<M>(), "meld::nn::load_checkpoint: see the messages above");
  static_assert(optim::optimizer<O>,
                "meld::nn::load_checkpoint: the third argument must satisfy meld::optim::optimizer "
                "(step(), zero_grad(), visit_state(f), model_type)");
  std::vector<detail::ckpt::slot> slots;
  detail::ckpt::model_slots(model, slots, detail::ckpt::staging::load);
  detail::ckpt::optimizer_slots(optimizer, slots, detail::ckpt::staging::load);
  detail::ckpt::load(path, element_code<typename M::value_type>(), slots, true);
}

/// @}

}  // namespace meld::nn
