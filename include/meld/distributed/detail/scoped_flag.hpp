// scoped_flag: sets a flag for its lifetime and restores what it was (data_parallel's no_sync
// guard: steps inside it accumulate gradients without communicating).
#pragma once

#include <utility>

namespace meld::detail::distributed {

class scoped_flag {
 public:
  explicit scoped_flag(bool& flag) : flag_(&flag), was_(flag) { flag = true; }
  // The moved-from guard restores nothing.
  scoped_flag(scoped_flag&& o) noexcept : flag_(std::exchange(o.flag_, nullptr)), was_(o.was_) {}
  scoped_flag(const scoped_flag&) = delete;
  scoped_flag& operator=(const scoped_flag&) = delete;
  scoped_flag& operator=(scoped_flag&&) = delete;
  ~scoped_flag() {
    if (flag_) *flag_ = was_;
  }

 private:
  bool* flag_;
  bool was_;
};

}  // namespace meld::detail::distributed
