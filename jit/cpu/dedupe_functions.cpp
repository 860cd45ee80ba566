#include "jit/cpu/dedupe_functions.h"

#include <string_view>
#include <unordered_map>

namespace towerjit::cpujit {
namespace {

// The defined function's name in a "define ... @name(" line; empty when the line is none.
std::string_view defined_name(std::string_view line) {
  if (!line.starts_with("define ")) return {};
  const size_t at = line.find('@');
  if (at == std::string_view::npos) return {};
  const size_t open = line.find('(', at);
  if (open == std::string_view::npos) return {};
  return line.substr(at + 1, open - at - 1);
}

}  // namespace

DedupedModule dedupe_functions(const std::string& ll_text) {
  DedupedModule out;
  out.text.reserve(ll_text.size());
  // Body text with the function's own name blanked -> the name of the first with that body.
  std::unordered_map<std::string, std::string> kept;
  const std::string_view text(ll_text);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    end = end == std::string_view::npos ? text.size() : end + 1;
    const std::string_view line = text.substr(pos, end - pos);
    const std::string_view name = defined_name(line);
    if (name.empty()) {
      out.text.append(line);
      pos = end;
      continue;
    }
    // The definition runs to the first line that is "}" alone.
    size_t close = text.find("\n}\n", pos);
    if (close == std::string_view::npos) {  // not the emitter's shape: keep the rest untouched
      out.text.append(text.substr(pos));
      break;
    }
    const size_t def_end = close + 3;
    const std::string_view def = text.substr(pos, def_end - pos);
    const size_t name_at = name.data() - text.data() - pos;
    std::string body(def);
    body.replace(name_at, name.size(), "");
    // A definition that names itself again (a recursive call) is not compared: set aside.
    const bool self_reference = def.substr(name_at + name.size()).find("@" + std::string(name) + "(") !=
                                std::string_view::npos;
    ++out.functions;
    auto [it, inserted] = self_reference ? std::pair{kept.end(), true} : kept.try_emplace(std::move(body), name);
    if (inserted) {
      ++out.distinct;
      out.text.append(def);
    } else {
      out.aliases.emplace_back(std::string(name), it->second);
      out.text += "; " + std::string(name) + ": the same code as " + it->second + "\n";
    }
    pos = def_end;
  }
  return out;
}

}  // namespace towerjit::cpujit
