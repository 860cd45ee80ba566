// A strict reader of the JSON that safetensors headers hold: objects, arrays, strings and
// non-negative integers (no floats, booleans or null, which the format never uses). Strict
// where a lenient reader would hide a damaged or forged file: a key given twice, a number past
// 2^64 - 1, a control character in a string, nesting deeper than `max_depth`, or text after the
// value are all errors.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace towerjit::json {

struct Value {
  enum class Kind { object, array, string, integer } kind = Kind::object;
  // An object's members in file order: keys[i] names values[i]. (Two vectors, not one of
  // pairs: a pair needs Value complete where it is declared.)
  std::vector<std::string> keys;
  std::vector<Value> values;
  std::vector<Value> items;  // an array's
  std::string text;                                     // a string's, decoded to UTF-8
  uint64_t integer = 0;

  // The member named `key` of an object, or nullptr.
  const Value* find(std::string_view key) const;
};

const char* kind_name(Value::Kind kind);  // "object", "array", "string", "integer"

// Parses `text` (leading and trailing whitespace allowed). On failure returns false with
// `error` saying what and at which byte; never throws.
bool parse(std::string_view text, Value& out, std::string& error, int max_depth = 8);

// `s` as a JSON string literal, quotes included (", \ and control characters escaped).
std::string quote(std::string_view s);

}  // namespace towerjit::json
