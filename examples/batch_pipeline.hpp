// The input pipeline of the training example: while step i computes, a background thread gathers
// batch i + 1 (the shuffled samples copied into a host buffer, double-buffered), so that a step
// waits for its batch only when gathering is slower than computing. The caller then hands the host
// batch to its backend (meld::to: on an asynchronous device a queued copy that returns at once, so
// the transfer overlaps the step too). Without prefetching, next() gathers on the calling thread:
// the baseline that benchmarks/RESULTS.md compares against.
#pragma once

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <meld/meld.hpp>

#include "fashion_mnist.hpp"

namespace fashion_mnist {

// Rows order[first, first + count) of the data set, copied into images {count, 1, 28, 28} and
// labels {count} (reallocated when the count changes). Images are made from the data set's bytes
// where it keeps them, by the same float operations that standardized its images (the same bits):
// a quarter of the memory to read for the randomly ordered rows (on one core, the copy of the
// float rows was 3.5 % of an MLP epoch).
inline void gather(const dataset& d, const std::vector<meld::index_t>& order, meld::index_t first,
                   meld::index_t count, meld::tensor<float>& images,
                   meld::tensor<std::int64_t>& labels) {
  constexpr meld::index_t pixels = rows * cols, ahead = 4;
  if (images.rank() != 4 || images.shape()[0] != count) {
    images = meld::tensor<float>({count, 1, rows, cols}, meld::uninitialized);
    labels = meld::tensor<std::int64_t>({count}, meld::uninitialized);
  }
  const float* src = d.images.data();
  const std::uint8_t* bytes = d.pixels.empty() ? nullptr : d.pixels.data();
  const float mean = d.from_pixels.mean, scale = d.from_pixels.scale;
  const std::int64_t* src_labels = d.labels.data();
  float* dst = images.data();
  std::int64_t* dst_labels = labels.data();
  for (meld::index_t i = 0; i < count; ++i) {
    const meld::index_t s = order[static_cast<std::size_t>(first + i)];
    float* to = dst + i * pixels;
    if (bytes && i + ahead < count) {
      // The rows come in random order, so the hardware prefetchers cannot see the next one
      // coming: fetch the row `ahead` samples on while this one converts.
      const std::uint8_t* later =
          bytes + order[static_cast<std::size_t>(first + i + ahead)] * pixels;
      for (meld::index_t b = 0; b < pixels; b += 64) __builtin_prefetch(later + b);
    }
    if (bytes) {
      const std::uint8_t* from = bytes + s * pixels;
      for (meld::index_t j = 0; j < pixels; ++j)
        to[j] = (static_cast<float>(from[j]) - mean) * scale;
    } else {
      std::memcpy(to, src + s * pixels, pixels * sizeof(float));
    }
    dst_labels[i] = src_labels[s];
  }
}

class batch_pipeline {
 public:
  struct host_batch {
    meld::tensor<float> images{meld::shape_t{0}};
    meld::tensor<std::int64_t> labels{meld::shape_t{0}};
  };

  batch_pipeline(const dataset& d, meld::index_t batch, bool prefetch)
      : data_(&d), batch_(batch), prefetch_(prefetch) {
    if (prefetch_) worker_ = std::thread([this] { loop(); });
  }
  ~batch_pipeline() {
    {
      std::lock_guard lock(mutex_);
      quit_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }
  batch_pipeline(const batch_pipeline&) = delete;
  batch_pipeline& operator=(const batch_pipeline&) = delete;

  // The batches of one epoch, in this order of the samples; gathering of the first one starts.
  void start_epoch(std::vector<meld::index_t> order) {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return !busy_; });  // the last epoch's prefetch is done
    order_ = std::move(order);
    next_ = 0;
    wanted_ = 0;
    ready_ = -1;
    batches_ = (static_cast<meld::index_t>(order_.size()) + batch_ - 1) / batch_;
    lock.unlock();
    if (prefetch_) request(0);
  }

  // Batch b of the epoch (b counts from 0 at each start_epoch), valid until the next call; starts
  // gathering batch b + 1.
  const host_batch& next() {
    const meld::index_t b = next_++;
    host_batch& out = buffers_[b % 2];
    if (!prefetch_) {
      fill(b, out);
      return out;
    }
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return ready_ >= b; });
    }
    if (b + 1 < batches_) request(b + 1);  // into the other buffer, which the caller is done with
    return out;
  }

 private:
  void fill(meld::index_t b, host_batch& out) const {
    const meld::index_t first = b * batch_;
    const meld::index_t count = std::min(batch_, static_cast<meld::index_t>(order_.size()) - first);
    gather(*data_, order_, first, count, out.images, out.labels);
  }
  void request(meld::index_t b) {
    {
      std::lock_guard lock(mutex_);
      wanted_ = b;
      busy_ = true;
    }
    cv_.notify_all();
  }
  void loop() {
    std::unique_lock lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return quit_ || (busy_ && wanted_ > ready_); });
      if (quit_) return;
      const meld::index_t b = wanted_;
      lock.unlock();
      fill(b, buffers_[b % 2]);
      lock.lock();
      ready_ = b;
      busy_ = false;
      cv_.notify_all();
    }
  }

  const dataset* data_;
  meld::index_t batch_;
  bool prefetch_;
  std::vector<meld::index_t> order_;
  meld::index_t batches_ = 0, next_ = 0;
  host_batch buffers_[2];
  std::mutex mutex_;
  std::condition_variable cv_;
  meld::index_t wanted_ = 0, ready_ = -1;  // guarded by mutex_
  bool busy_ = false, quit_ = false;
  std::thread worker_;
};

}  // namespace fashion_mnist
