// A character corpus for examples/char_lm.cpp: text files read at run time, split into a
// training part and a held-out part (the last share of every file), an alphabet of the bytes
// they hold, the windows a language model trains on (tokens and the next characters as
// targets), and the unigram baseline a model must beat.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "towerjit.h"

namespace examples {

// Debian's base-files package puts the common licences' texts here on every Debian system.
inline const char* const kLicenseCorpus = "/usr/share/common-licenses";

struct CharCorpus {
  std::vector<std::string> files;  // what was read, in order
  std::string train, held_out;
  std::vector<unsigned char> alphabet;  // token id -> byte
  std::array<int32_t, 256> id_of{};     // byte -> token id, -1 for a byte the corpus lacks
  int64_t vocab() const { return static_cast<int64_t>(alphabet.size()); }
};

// `path`: a text file, or a directory whose regular files (symbolic links skipped: Debian's
// GPL -> GPL-3 would count a text twice) are read in name order. The last `held_out_share` of
// every file is held out. Errors (towerjit::Error): no such path, no text in it.
inline CharCorpus load_corpus(const std::string& path, double held_out_share) {
  namespace fs = std::filesystem;
  CharCorpus c;
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw towerjit::Error("char_lm: no corpus at " + path +
                          (path == kLicenseCorpus ? " (Debian's base-files package installs the licence texts there)"
                                                  : std::string()) +
                          "; give --corpus FILE (or a directory of text files) to train on any text");
  if (fs::is_directory(path)) {
    for (const auto& e : fs::directory_iterator(path))
      if (e.is_regular_file() && !e.is_symlink()) c.files.push_back(e.path().string());
    std::sort(c.files.begin(), c.files.end());
  } else {
    c.files.push_back(path);
  }
  for (const std::string& file : c.files) {
    std::ifstream in(file, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    const size_t cut = s.size() - static_cast<size_t>(std::floor(static_cast<double>(s.size()) * held_out_share));
    c.train += s.substr(0, cut);
    c.held_out += s.substr(cut);
  }
  if (c.train.empty())
    throw towerjit::Error("char_lm: the corpus at " + path + " holds no text to train on; give --corpus FILE");
  c.id_of.fill(-1);
  std::array<bool, 256> seen{};
  for (const std::string* s : {&c.train, &c.held_out})
    for (unsigned char b : *s) seen[b] = true;
  for (int b = 0; b < 256; ++b)
    if (seen[b]) {
      c.id_of[b] = static_cast<int32_t>(c.alphabet.size());
      c.alphabet.push_back(static_cast<unsigned char>(b));
    }
  return c;
}

// Windows of `context` + 1 characters of `text` starting every `stride`: "tokens" i32 [N, T]
// (characters 0..T-1) and "targets" i32 [N, T] (characters 1..T, the next of each).
inline towerjit::HostFeeds windows(const std::string& text, const CharCorpus& c, int64_t context, int64_t stride) {
  const int64_t length = static_cast<int64_t>(text.size());
  const int64_t n = length > context ? (length - context - 1) / stride + 1 : 0;
  towerjit::HostTensor tokens({n, context}, towerjit::DType::i32), targets({n, context}, towerjit::DType::i32);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = 0; t < context; ++t) {
      tokens.i32[i * context + t] = c.id_of[static_cast<unsigned char>(text[i * stride + t])];
      targets.i32[i * context + t] = c.id_of[static_cast<unsigned char>(text[i * stride + t + 1])];
    }
  return {{"tokens", tokens}, {"targets", targets}};
}

// The unigram model's mean loss (nats per character) on the targets of `held_out` windows:
// each character's probability its count in the training text, add-one smoothed over the
// alphabet (a character the training text lacks would otherwise cost an infinite loss).
inline double unigram_loss(const CharCorpus& c, const towerjit::HostTensor& targets) {
  std::vector<double> count(c.alphabet.size(), 1.0);
  for (unsigned char b : c.train) count[c.id_of[b]] += 1;
  const double total = static_cast<double>(c.train.size() + c.alphabet.size());
  double loss = 0;
  for (int32_t id : targets.i32) loss -= std::log(count[id] / total);
  return targets.i32.empty() ? 0 : loss / static_cast<double>(targets.i32.size());
}

}  // namespace examples
