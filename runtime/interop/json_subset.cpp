#include "runtime/interop/json_subset.h"

#include <cstdio>
#include <set>

namespace towerjit::json {
namespace {

class Parser {
 public:
  Parser(std::string_view s, int max_depth) : s_(s), max_depth_(max_depth) {}

  bool run(Value& out, std::string& error) {
    skip_space();
    bool ok = value(out, 0);
    skip_space();
    if (ok && pos_ != s_.size()) ok = fail("text after the value");
    if (!ok) error = error_ + " at byte " + std::to_string(pos_);
    return ok;
  }

 private:
  bool fail(const std::string& what) {
    if (error_.empty()) error_ = what;
    return false;
  }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  bool take(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) return ++pos_, true;
    return false;
  }

  bool value(Value& v, int depth) {
    if (depth > max_depth_) return fail("nesting deeper than " + std::to_string(max_depth_));
    skip_space();
    if (pos_ >= s_.size()) return fail("the text ends where a value should be");
    const char c = s_[pos_];
    if (c == '{') return object(v, depth);
    if (c == '[') return array(v, depth);
    if (c == '"') return v.kind = Value::Kind::string, string(v.text);
    if (c >= '0' && c <= '9') return v.kind = Value::Kind::integer, integer(v.integer);
    return fail(std::string("an unexpected '") + c + "' (only objects, arrays, strings and non-negative integers)");
  }

  bool object(Value& v, int depth) {
    v.kind = Value::Kind::object;
    ++pos_;
    if (take('}')) return true;
    std::set<std::string> keys;  // a lookup per member: a header of many tensors stays linear-log
    do {
      skip_space();
      std::string key;
      if (pos_ >= s_.size() || s_[pos_] != '"') return fail("a member without a quoted key");
      if (!string(key)) return false;
      if (!keys.insert(key).second) return fail("the key \"" + key + "\" given twice");
      if (!take(':')) return fail("a missing ':'");
      Value member;
      if (!value(member, depth + 1)) return false;
      v.keys.push_back(std::move(key));
      v.values.push_back(std::move(member));
    } while (take(','));
    return take('}') || fail("a missing ',' or '}'");
  }

  bool array(Value& v, int depth) {
    v.kind = Value::Kind::array;
    ++pos_;
    if (take(']')) return true;
    do {
      Value item;
      if (!value(item, depth + 1)) return false;
      v.items.push_back(std::move(item));
    } while (take(','));
    return take(']') || fail("a missing ',' or ']'");
  }

  bool integer(uint64_t& out) {
    if (s_[pos_] == '0' && pos_ + 1 < s_.size() && s_[pos_ + 1] >= '0' && s_[pos_ + 1] <= '9')
      return fail("a number with a leading zero");
    out = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      const uint64_t d = static_cast<uint64_t>(s_[pos_++] - '0');
      if (out > (UINT64_MAX - d) / 10) return fail("a number past 2^64 - 1");
      out = out * 10 + d;
    }
    if (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E'))
      return fail("a number that is not a whole number");
    return true;
  }

  bool hex4(uint32_t& u) {
    if (s_.size() - pos_ < 4) return fail("a \\u escape cut short");
    u = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[pos_++];
      const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) return fail("a \\u escape with a non-hex digit");
      u = u * 16 + static_cast<uint32_t>(d);
    }
    return true;
  }

  static void utf8(uint32_t u, std::string& out) {
    if (u < 0x80) {
      out += static_cast<char>(u);
    } else if (u < 0x800) {
      out += static_cast<char>(0xc0 | (u >> 6)), out += static_cast<char>(0x80 | (u & 0x3f));
    } else if (u < 0x10000) {
      out += static_cast<char>(0xe0 | (u >> 12)), out += static_cast<char>(0x80 | ((u >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (u & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (u >> 18)), out += static_cast<char>(0x80 | ((u >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((u >> 6) & 0x3f)), out += static_cast<char>(0x80 | (u & 0x3f));
    }
  }

  bool string(std::string& out) {
    ++pos_;  // the opening quote
    while (true) {
      if (pos_ >= s_.size()) return fail("an unterminated string");
      const unsigned char c = static_cast<unsigned char>(s_[pos_++]);
      if (c == '"') return true;
      if (c < 0x20) return fail("a control character in a string");
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (pos_ >= s_.size()) return fail("an unterminated string");
      const char e = s_[pos_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t u = 0;
          if (!hex4(u)) return false;
          if (u >= 0xdc00 && u < 0xe000) return fail("a lone low surrogate");
          if (u >= 0xd800 && u < 0xdc00) {  // a pair: \uD8xx\uDCxx
            uint32_t low = 0;
            if (s_.substr(pos_, 2) != "\\u") return fail("a lone high surrogate");
            pos_ += 2;
            if (!hex4(low)) return false;
            if (low < 0xdc00 || low >= 0xe000) return fail("a high surrogate without its low half");
            u = 0x10000 + ((u - 0xd800) << 10) + (low - 0xdc00);
          }
          utf8(u, out);
          break;
        }
        default: return fail(std::string("an unknown escape \\") + e);
      }
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
  int max_depth_;
  std::string error_;
};

}  // namespace

const Value* Value::find(std::string_view key) const {
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i] == key) return &values[i];
  return nullptr;
}

const char* kind_name(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::object: return "object";
    case Value::Kind::array: return "array";
    case Value::Kind::string: return "string";
    case Value::Kind::integer: return "integer";
  }
  return "?";
}

bool parse(std::string_view text, Value& out, std::string& error, int max_depth) {
  out = Value{};
  return Parser(text, max_depth).run(out, error);
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\', out += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

}  // namespace towerjit::json
