// What data_parallel reads of each replica and of each batch: the replica's parameters with their
// gradients (in the model's order, checked against the sizes at construction), the lookup from a
// gradient that backward reports ready to its parameter, the device the replica lives on, and
// the rows of a batch that a worker takes.
#pragma once

#include <algorithm>
#include <any>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

#include "../../backend/device.hpp"
#include "../../core/error.hpp"
#include "../../tensor/convert.hpp"
#include "../../tensor/slice.hpp"
#include "../../tensor/tensor.hpp"
#include "bucket_engine.hpp"

namespace meld::detail::distributed {

template <class Tensor>
struct replica_params {
  std::vector<param_ref<Tensor>> params;
  std::vector<Tensor*> buffers;
  std::vector<std::pair<const Tensor*, int>> grad_index;  // sorted by address

  // (Re-)reads the model's parameter list (the tensors may have been replaced since) and checks
  // it against the sizes at construction.
  template <class Model>
  void read(Model& model, const std::vector<index_t>& sizes) {
    params.clear();
    grad_index.clear();
    model.visit_parameters([&](std::string_view name, Tensor& p, Tensor& g) {
      const std::size_t i = params.size();
      if (i >= sizes.size() || p.size() != sizes[i] || g.size() != p.size())
        throw std::logic_error(cat("data_parallel: parameter ", i, " ('", name,
                                   "') changed since construction: it has ", p.size(),
                                   " elements and a gradient of ", g.size(), ", expected ",
                                   i < sizes.size() ? sizes[i] : index_t(-1)));
      params.push_back({&p, &g});
      grad_index.emplace_back(&g, static_cast<int>(i));
    });
    if (params.size() != sizes.size())
      throw std::logic_error(cat("data_parallel: the model now has ", params.size(),
                                 " parameters, ", sizes.size(), " at construction"));
    std::sort(grad_index.begin(), grad_index.end());
    buffers.clear();
    model.visit_buffers([&](std::string_view, Tensor& b) { buffers.push_back(&b); });
  }

  // The index of the parameter whose gradient is g.
  int index_of(const Tensor& g) const {
    auto it = std::lower_bound(grad_index.begin(), grad_index.end(),
                               std::pair<const Tensor*, int>(&g, -1));
    if (it == grad_index.end() || it->first != &g)
      throw std::logic_error(
          "data_parallel: the model's backward reported a gradient that visit_parameters does "
          "not hand out");
    return it->second;
  }
};

// Replica `to` takes the parameters of replica `from`, which nothing writes meanwhile. On the same
// device it shares their elements: from then on they are the same tensors' elements, nothing to
// copy (data_parallel's 2-worker MLP in the example copied 0.94 MB a step on rank 1 before its
// forward). On another device it copies them.
template <class Tensor>
void take_parameters(replica_params<Tensor>& to, const replica_params<Tensor>& from,
                     bool same_device) {
  for (std::size_t i = 0; i < to.params.size(); ++i) {
    Tensor& p = *to.params[i].param;
    const Tensor& source = *from.params[i].param;
    if (p.raw_data() == source.raw_data()) continue;  // shared already
    if (same_device)
      p = share_elements(source, source.shape());
    else
      meld::copy(p, source);
  }
}

// The T that `slot` holds (a worker's targets, reused from step to step), made first if it holds
// none.
template <class T>
T& held(std::any& slot) {
  if (!std::any_cast<T>(&slot)) slot.template emplace<T>();
  return *std::any_cast<T>(&slot);
}

// The device a model's parameters live on (the current one if it has none).
template <class Model>
int device_of(Model& m) {
  using tensor_type = tensor<typename Model::value_type, typename Model::backend_type>;
  int device = memory<typename Model::backend_type>::current_device();
  bool first = true;
  m.visit_parameters([&](std::string_view, tensor_type& p, tensor_type&) {
    if (first && p.storage_ptr()) device = p.device();
    first = false;
  });
  return device;
}

// dst = rows [lo, hi) of src, on the current device (device to device where src is on another
// one, never through the host).
template <class X>
void take_rows(X& dst, const X& src, index_t lo, index_t hi) {
  using B = typename X::backend_type;
  const auto rows = src.slice(range(lo, hi));
  if (src.device() == memory<B>::current_device()) {
    dst = rows;
    return;
  }
  if (!(dst.shape() == rows.shape()) || dst.device() != memory<B>::current_device())
    dst = X(rows.shape(), uninitialized);
  meld::copy(dst, rows);
}

// The batch size of inputs and targets, which must share axis 0.
template <class Tensor, class Targets>
index_t check_batch(const Tensor& inputs, const Targets& targets, const char* what) {
  if (inputs.rank() < 1 || targets.rank() < 1 || inputs.shape()[0] != targets.shape()[0])
    throw shape_error(cat("data_parallel::", what, ": inputs of shape ", inputs.shape(),
                          " and targets of shape ", targets.shape(),
                          " do not share a batch axis 0"));
  return inputs.shape()[0];
}

}  // namespace meld::detail::distributed
