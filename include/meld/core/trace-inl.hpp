// The definitions of the trace recorder (trace.hpp): compiled in every translation unit of a
// header-only program, once in meld::runtime otherwise.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

#include "trace.hpp"

namespace meld::detail {

inline thread_local trace_thread* trace_mine = nullptr;  // this thread's buffer, once it has one
inline thread_local std::string trace_thread_name;       // trace::name_thread's
inline thread_local bool trace_main_thread = false;      // the thread that constructed the recorder

inline long trace_pid() {
#if defined(__unix__) || defined(__APPLE__)
  return static_cast<long>(::getpid());
#else
  return 1;
#endif
}

// path with "%p" replaced by the process id.
inline std::string trace_path(std::string path) {
  for (std::size_t at = 0; (at = path.find("%p", at)) != std::string::npos;) {
    const std::string pid = std::to_string(trace_pid());
    path.replace(at, 2, pid);
    at += pid.size();
  }
  return path;
}

// s as the body of a JSON string.
inline void trace_escape(std::string& out, const char* s) {
  for (; *s; ++s) {
    const unsigned char c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      static const char hex[] = "0123456789abcdef";
      out += "\\u00";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
}

// Nanoseconds as microseconds with three decimals (integer arithmetic: no locale).
inline void trace_micros(std::string& out, std::int64_t ns) {
  if (ns < 0) {
    out += '-';
    ns = -ns;
  }
  const std::string frac = std::to_string(ns % 1000);
  out += std::to_string(ns / 1000);
  out += '.';
  out.append(3 - frac.size(), '0');
  out += frac;
}

MELD_RUNTIME trace_recorder& trace_recorder::get() {
  static trace_recorder r;
  return r;
}

MELD_RUNTIME trace_recorder::trace_recorder() {
  trace_main_thread = true;
  if (const char* path = std::getenv("MELD_TRACE"); path && *path) start(path);
}

MELD_RUNTIME trace_recorder::~trace_recorder() {
  std::string path;
  {
    std::lock_guard lock(mutex_);
    path = path_;
  }
  if (trace_enabled() && !path.empty()) {
    try {
      write(path);
    } catch (const std::exception& e) {  // nothing to throw to at exit
      std::fprintf(stderr, "%s\n", e.what());
    }
  }
  trace_sinks.fetch_and(~trace_to_recorder, std::memory_order_relaxed);
}

MELD_RUNTIME trace_thread& trace_recorder::this_thread() {
  if (trace_mine) return *trace_mine;
  auto t = std::make_unique<trace_thread>();
  std::lock_guard lock(mutex_);
  t->tid = static_cast<int>(threads_.size()) + 1;
  t->name = !trace_thread_name.empty() ? trace_thread_name
            : trace_main_thread        ? std::string("main")
                                       : "thread " + std::to_string(t->tid);
  trace_mine = t.get();
  threads_.push_back(std::move(t));
  return *trace_mine;
}

MELD_RUNTIME void trace_recorder::record(trace_event&& e) {
  if (!trace_enabled()) return;  // stopped while the range was open
  trace_thread& t = this_thread();
  std::lock_guard lock(t.mutex);
  t.events.push_back(std::move(e));
}

MELD_RUNTIME void trace_recorder::name_thread(const std::string& name) {
  trace_thread_name = name;
  if (trace_mine) {
    std::lock_guard lock(trace_mine->mutex);
    trace_mine->name = name;
  }
}

MELD_RUNTIME void trace_recorder::start(const std::string& path) {
  std::lock_guard lock(mutex_);
  path_ = trace_path(path);
  for (auto& t : threads_) {
    std::lock_guard events(t->mutex);
    t->events.clear();
  }
  trace_sinks.fetch_or(trace_to_recorder, std::memory_order_relaxed);
}

MELD_RUNTIME void trace_recorder::stop() {
  std::string path;
  {
    std::lock_guard lock(mutex_);
    trace_sinks.fetch_and(~trace_to_recorder, std::memory_order_relaxed);
    path = std::exchange(path_, std::string());
  }
  if (!path.empty()) write(path);
}

MELD_RUNTIME void trace_recorder::write(const std::string& path) {
  const std::string file = trace_path(path);
  const std::string pid = std::to_string(trace_pid());
  std::string out = "{\"traceEvents\":[";
  bool first = true;
  const auto open = [&](const char* name, const char* phase, int tid) {
    out += first ? "\n{\"name\":\"" : ",\n{\"name\":\"";
    first = false;
    trace_escape(out, name);
    out += "\",\"ph\":\"";
    out += phase;
    out += "\",\"pid\":" + pid + ",\"tid\":" + std::to_string(tid);
  };
  {
    std::lock_guard lock(mutex_);
    for (const auto& t : threads_) {
      std::vector<trace_event> events;
      std::string name;
      {
        std::lock_guard copy(t->mutex);
        events = t->events;
        name = t->name;
      }
      open("thread_name", "M", t->tid);
      out += ",\"args\":{\"name\":\"";
      trace_escape(out, name.c_str());
      out += "\"}}";
      open("thread_sort_index", "M", t->tid);
      out += ",\"args\":{\"sort_index\":" + std::to_string(name == "main" ? 0 : t->tid) + "}}";
      // Enclosing ranges first: a range ends (and is appended) after the ranges inside it.
      std::stable_sort(events.begin(), events.end(), [](const auto& a, const auto& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
      });
      for (const trace_event& e : events) {
        open(e.name ? e.name : e.text.c_str(), "X", t->tid);
        out += ",\"cat\":\"";
        trace_escape(out, e.category ? e.category : "meld");
        out += "\",\"ts\":";
        trace_micros(out, e.begin);
        out += ",\"dur\":";
        trace_micros(out, std::max<std::int64_t>(e.end - e.begin, 0));
        bool any = false;
        for (const trace_arg& a : e.args) {
          if (!a.key) continue;
          out += any ? ",\"" : ",\"args\":{\"";
          any = true;
          trace_escape(out, a.key);
          out += "\":" + std::to_string(a.value);
        }
        out += any ? "}}" : "}";
      }
    }
  }
  out += "\n],\"displayTimeUnit\":\"ms\"}\n";
  std::FILE* f = std::fopen(file.c_str(), "wb");
  if (!f)
    throw std::runtime_error("meld::trace: cannot write '" + file + "': " + std::strerror(errno));
  const bool written = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  if (std::fclose(f) != 0 || !written)
    throw std::runtime_error("meld::trace: writing '" + file + "' failed");
}

}  // namespace meld::detail
