// The training example's progress on a terminal: one line redrawn in place with '\r', as Keras's
// progress bar does,
//   epoch 2/10 [=========>..........] 117/235  4.1s elapsed, 38.2s left  loss 0.4123  acc 0.8512
//   ...
// fitted to the terminal's width (a line that wraps cannot be redrawn: '\r' goes back to the start
// of its last row only).
#pragma once

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace console {

// 4.1s, 1m02s, 1h02m.
inline std::string duration(double s) {
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%dh%02dm", int(s / 3600), int(std::fmod(s, 3600) / 60));
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%dm%02ds", int(s / 60), int(std::fmod(s, 60)));
  else
    std::snprintf(buf, sizeof buf, "%.1fs", s);
  return buf;
}

inline bool is_terminal(std::FILE* f) {
  return isatty(fileno(f)) != 0;
}

// The terminal's width in columns; 80 when it does not say (not a terminal).
inline int columns(std::FILE* f) {
  winsize w{};
  if (ioctl(fileno(f), TIOCGWINSZ, &w) == 0 && w.ws_col > 0) return w.ws_col;
  return 80;
}

// [=====>....]: `width` characters between the brackets, filled to `fraction` of them.
inline std::string bar(double fraction, int width) {
  const int full = std::clamp(static_cast<int>(fraction * width), 0, width);
  std::string s = "[" + std::string(static_cast<std::size_t>(full), '=');
  if (full < width) s += '>' + std::string(static_cast<std::size_t>(width - full - 1), '.');
  return s + "]";
}

// One line of a terminal, redrawn in place.
class line {
 public:
  explicit line(std::FILE* f) : f_(f) {}

  // Draws `before`, a bar filled to `fraction`, and `parts` two spaces apart, as much as the
  // terminal's width allows (its last column but one: some terminals wrap on reaching the last).
  // The bar takes the room the text leaves, 30 columns at most; where even a bar of 6 would not
  // fit, the parts go from the last, then the text is cut.
  void draw(const std::string& before, double fraction, const std::vector<std::string>& parts) {
    constexpr std::size_t min_bar = 6, max_bar = 30;
    const auto cols = static_cast<std::size_t>(std::max(columns(f_) - 1, 1));
    std::size_t k = parts.size(), width = 0;  // parts shown, and their width with separators
    for (std::size_t i = 0; i < k; ++i) width += parts[i].size() + (i ? 2 : 0);
    while (k > 1 && before.size() + min_bar + 4 + width > cols) {
      --k;
      width -= parts[k].size() + 2;
    }
    std::string text = before + " ";
    if (before.size() + min_bar + 4 + width <= cols) {
      const std::size_t room = cols - before.size() - 4 - width;
      text += bar(fraction, static_cast<int>(std::min(room, max_bar))) + " ";
    }
    for (std::size_t i = 0; i < k; ++i) text += (i ? "  " : "") + parts[i];
    if (text.size() > cols) text.resize(cols);
    // Spaces over what is left of a longer previous line.
    const std::size_t pad = shown_ > text.size() ? shown_ - text.size() : 0;
    std::fprintf(f_, "\r%s%s", text.c_str(), std::string(pad, ' ').c_str());
    std::fflush(f_);
    shown_ = text.size() + pad;
  }
  // Keeps the line on the screen and moves to the next.
  void finish() {
    if (shown_ == 0) return;
    std::fprintf(f_, "\n");
    std::fflush(f_);
    shown_ = 0;
  }
  // Erases the line (what follows is written where it was).
  void clear() {
    if (shown_ == 0) return;
    std::fprintf(f_, "\r%s\r", std::string(shown_, ' ').c_str());
    std::fflush(f_);
    shown_ = 0;
  }

 private:
  std::FILE* f_;
  std::size_t shown_ = 0;  // characters on the line now
};

}  // namespace console
