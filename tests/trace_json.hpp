// Reading the traces meld writes (core/trace.hpp) in tests: a strict JSON parser (RFC 8259: what
// Python's json module accepts, less NaN and Infinity) and the Chrome-trace events of a file.
#pragma once

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__unix__)
#include <unistd.h>
#endif

namespace test {

// A trace file of this process's own in the temporary directory: meld_<stem>_<pid>_<name>.json.
inline std::string trace_temp_path(const std::string& stem, const std::string& name) {
#if defined(__unix__)
  const std::string pid = std::to_string(::getpid());
#else
  const std::string pid = "0";
#endif
  return (std::filesystem::temp_directory_path() /
          ("meld_" + stem + "_" + pid + "_" + name + ".json"))
      .string();
}

struct json {
  enum class kind { null, boolean, number, string, array, object };
  kind type = kind::null;
  bool boolean = false;
  double number = 0;
  std::string text;
  std::vector<json> items;        // an array's
  std::vector<std::string> keys;  // an object's, in order, with their values
  std::vector<json> values;

  const json* find(const std::string& key) const {
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == key) return &values[i];
    return nullptr;
  }
};

class json_parser {
 public:
  explicit json_parser(const std::string& text) : s_(text) {}

  // The one value of the text; throws std::runtime_error naming the offset of a syntax error.
  json parse() {
    json v = value();
    space();
    if (at_ != s_.size()) fail("text after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("invalid JSON at byte " + std::to_string(at_) + ": " + what);
  }
  void space() {
    while (at_ < s_.size() &&
           (s_[at_] == ' ' || s_[at_] == '\n' || s_[at_] == '\r' || s_[at_] == '\t'))
      ++at_;
  }
  bool take(char c) {
    space();
    if (at_ < s_.size() && s_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!take(c)) fail(std::string("expected '") + c + "'");
  }
  bool word(const char* w) {
    const std::string t(w);
    if (s_.compare(at_, t.size(), t) != 0) return false;
    at_ += t.size();
    return true;
  }

  json value() {
    space();
    if (at_ >= s_.size()) fail("a value is missing");
    json v;
    const char c = s_[at_];
    if (c == '{') {
      ++at_;
      v.type = json::kind::object;
      if (take('}')) return v;
      do {
        space();
        v.keys.push_back(string());
        expect(':');
        v.values.push_back(value());
      } while (take(','));
      expect('}');
    } else if (c == '[') {
      ++at_;
      v.type = json::kind::array;
      if (take(']')) return v;
      do v.items.push_back(value());
      while (take(','));
      expect(']');
    } else if (c == '"') {
      v.type = json::kind::string;
      v.text = string();
    } else if (word("true") || word("false")) {
      v.type = json::kind::boolean;
      v.boolean = c == 't';
    } else if (word("null")) {
      v.type = json::kind::null;
    } else {
      v.type = json::kind::number;
      v.number = number();
    }
    return v;
  }

  std::string string() {
    if (at_ >= s_.size() || s_[at_] != '"') fail("expected a string");
    ++at_;
    std::string out;
    for (;;) {
      if (at_ >= s_.size()) fail("an unterminated string");
      const unsigned char c = static_cast<unsigned char>(s_[at_++]);
      if (c == '"') return out;
      if (c < 0x20) fail("a control character in a string");
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (at_ >= s_.size()) fail("an unterminated escape");
      const char e = s_[at_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          if (at_ + 4 > s_.size()) fail("a short \\u escape");
          unsigned code = 0;
          for (int i = 0; i < 4; ++i) {
            const char h = s_[at_++];
            if (!std::isxdigit(static_cast<unsigned char>(h))) fail("a bad \\u escape");
            code = code * 16 + static_cast<unsigned>(std::isdigit(static_cast<unsigned char>(h))
                                                         ? h - '0'
                                                         : (std::tolower(h) - 'a' + 10));
          }
          out += code < 0x80 ? static_cast<char>(code) : '?';  // the tests' names are ASCII
          break;
        }
        default:
          fail("an unknown escape");
      }
    }
  }

  double number() {
    const std::size_t start = at_;
    const auto digits = [&] {
      const std::size_t from = at_;
      while (at_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[at_]))) ++at_;
      return at_ > from;
    };
    if (at_ < s_.size() && s_[at_] == '-') ++at_;
    if (at_ < s_.size() && s_[at_] == '0')
      ++at_;
    else if (!digits())
      fail("expected a value");
    if (at_ < s_.size() && s_[at_] == '.') {
      ++at_;
      if (!digits()) fail("a fraction without digits");
    }
    if (at_ < s_.size() && (s_[at_] == 'e' || s_[at_] == 'E')) {
      ++at_;
      if (at_ < s_.size() && (s_[at_] == '+' || s_[at_] == '-')) ++at_;
      if (!digits()) fail("an exponent without digits");
    }
    return std::strtod(s_.substr(start, at_ - start).c_str(), nullptr);
  }

  const std::string& s_;
  std::size_t at_ = 0;
};

// One event of a Chrome trace.
struct trace_event {
  std::string name, cat, ph;
  double ts = 0, dur = 0;  // microseconds
  long long pid = 0, tid = 0;
  std::map<std::string, double> args;  // the numeric ones

  double end() const { return ts + dur; }
  bool has(const std::string& key) const { return args.count(key) == 1; }
  double arg(const std::string& key) const {
    const auto it = args.find(key);
    return it == args.end() ? -1 : it->second;
  }
};

// A trace file: its complete events in file order, and the threads' names (thread_name
// metadata). Throws std::runtime_error where the file is missing, is not JSON, or has no
// top-level traceEvents array.
struct trace_file {
  std::vector<trace_event> events;
  std::map<long long, std::string> thread_names;

  explicit trace_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const json root = json_parser(text).parse();
    const json* list = root.find("traceEvents");
    if (root.type != json::kind::object || !list || list->type != json::kind::array)
      throw std::runtime_error(path + " has no top-level traceEvents array");
    for (const json& e : list->items) {
      trace_event t;
      const auto str = [&](const char* key) {
        const json* v = e.find(key);
        return v && v->type == json::kind::string ? v->text : std::string();
      };
      const auto num = [&](const char* key) {
        const json* v = e.find(key);
        return v && v->type == json::kind::number ? v->number : -1.0;
      };
      t.name = str("name");
      t.cat = str("cat");
      t.ph = str("ph");
      t.ts = num("ts");
      t.dur = num("dur");
      t.pid = static_cast<long long>(num("pid"));
      t.tid = static_cast<long long>(num("tid"));
      const json* args = e.find("args");
      if (t.ph == "M" && t.name == "thread_name" && args && args->find("name"))
        thread_names[t.tid] = args->find("name")->text;
      if (t.ph != "X") continue;
      if (args)
        for (std::size_t i = 0; i < args->keys.size(); ++i)
          if (args->values[i].type == json::kind::number)
            t.args[args->keys[i]] = args->values[i].number;
      events.push_back(std::move(t));
    }
  }

  std::vector<trace_event> named(const std::string& name) const {
    std::vector<trace_event> out;
    for (const auto& e : events)
      if (e.name == name) out.push_back(e);
    return out;
  }
};

}  // namespace test
