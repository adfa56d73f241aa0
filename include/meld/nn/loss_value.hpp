// nn::loss_value<T, B>: a loss computed where the model lives, read on the host only when asked.
//
// Reading a device scalar every step makes the host wait for the device every step (d2l's lesson:
// `float(loss)` per batch serializes them). A loss_value keeps the sum of the per-sample losses as
// a small tensor on the backend, beside the count of targets that were out of range, and the
// number of samples on the host:
//
//   auto loss = nn::cross_entropy(logits, targets, grad);   // nothing comes back to the host
//   epoch_loss += loss;                                     // summed on the device
//   double mean = epoch_loss;                               // now: one transfer per device
//
// Sums on the same device add there; terms on other devices (data_parallel's workers on several
// GPUs) are kept apart and added on the host when read. A host loss (a number) is one more term.
// Reading throws std::out_of_range when a target was out of range: on a device the check rides
// along with the loss instead of stopping the host at every step (as CUDA's device-side
// assertions do), so the error surfaces at the first read after it.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <utility>
#include <vector>

#include "../backend/device.hpp"
#include "../tensor/convert.hpp"
#include "../tensor/tensor.hpp"
#include "layer.hpp"

namespace meld::nn {

/// \addtogroup nn
/// @{

/// The mean of a loss over some samples, kept on backend B until read (see above).
template <class T, class B>
class loss_value {
 public:
  using tensor_type = tensor<T, B>;  ///< the backend's tensors

  /// No samples yet: reads as 0.
  loss_value() = default;

  /// The loss over `samples` samples whose per-sample losses sum to sums(0), with sums(1) targets
  /// out of range (of `classes`), sums a tensor of 2 elements on B.
  loss_value(tensor_type sums, double samples, index_t classes) : samples_(samples) {
    if (sums.size() != 2)
      throw shape_error(detail::cat("loss_value: the sums have shape ", sums.shape(),
                                    ", expected {2} (loss sum, targets out of range)"));
    terms_.push_back({std::move(sums), classes});
  }

  /// A loss known on the host: `mean` over `samples` samples.
  static loss_value from_mean(double mean, double samples) {
    loss_value v;
    v.host_sum_ = mean * samples;
    v.samples_ = samples;
    return v;
  }

  loss_value(loss_value&&) noexcept = default;             ///< moves the terms
  loss_value& operator=(loss_value&&) noexcept = default;  ///< moves the terms
  /// A deep copy (the device sums too).
  loss_value(const loss_value& other) : host_sum_(other.host_sum_), samples_(other.samples_) {
    for (const term& t : other.terms_) terms_.push_back({tensor_type(t.sums), t.classes});
  }
  /// A deep copy (the device sums too).
  loss_value& operator=(const loss_value& other) {
    if (this != &other) *this = loss_value(other);
    return *this;
  }

  /// The mean over every sample added: copies each device's sums to the host (one transfer per
  /// device). Throws std::out_of_range naming the count when targets were out of range.
  double get() const {
    double sum = host_sum_, invalid = 0;
    index_t classes = 0;
    for (const term& t : terms_) {
      const tensor<T, cpu<>> h = meld::to<cpu<>>(t.sums);
      sum += static_cast<double>(h(0));
      invalid += static_cast<double>(h(1));
      classes = t.classes;
    }
    if (invalid > 0)
      throw std::out_of_range(detail::cat("softmax_cross_entropy: ", invalid,
                                          " class indices were outside [0, ", classes, ")"));
    return samples_ > 0 ? sum / samples_ : 0.0;
  }
  /// get(): `double loss = value;` reads it.
  operator double() const { return get(); }  // NOLINT: implicit on purpose, as meld::future

  /// The number of samples the mean is over.
  double samples() const { return samples_; }

  /// Adds the samples and sums of `other` (on the device where both have a term on it).
  loss_value& operator+=(const loss_value& other) {
    host_sum_ += other.host_sum_;
    samples_ += other.samples_;
    for (const term& o : other.terms_) {
      term* same = nullptr;
      for (term& t : terms_)
        if (t.sums.device() == o.sums.device()) same = &t;
      if (same) {
        same->sums += o.sums;
      } else {  // a copy on o's device (a tensor's copy is made on the current one)
        device_guard<B> on(o.sums.device());
        terms_.push_back({tensor_type(o.sums), o.classes});
      }
    }
    return *this;
  }

  /// Adds every sum, the host's part too, into `out` ({2} on B: {loss sum, targets out of
  /// range}) on out's device: terms on other devices are copied device to device.
  void add_sums_to(tensor_type& out) const {
    for (const term& t : terms_) {
      if (t.sums.device() == out.device())
        out += t.sums;
      else
        out += meld::to<B>(t.sums);
    }
    if (host_sum_ != 0) {
      tensor<T, cpu<>> host({2});
      host(0) = static_cast<T>(host_sum_);
      out += meld::to<B>(host);
    }
  }
  /// The class count of the terms' targets (0 if none), for the out-of-range message.
  index_t classes() const {
    index_t c = 0;
    for (const term& t : terms_) c = std::max(c, t.classes);
    return c;
  }

 private:
  struct term {
    tensor_type sums;  // {loss sum, targets out of range}
    index_t classes;
  };
  std::vector<term> terms_;
  double host_sum_ = 0;
  double samples_ = 0;
};

/// Whether X is an nn::loss_value.
template <class X>
inline constexpr bool is_loss_value = false;
/// Whether X is an nn::loss_value.
template <class T, class B>
inline constexpr bool is_loss_value<loss_value<T, B>> = true;

/// @}

}  // namespace meld::nn
