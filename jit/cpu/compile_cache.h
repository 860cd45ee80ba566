// The on-disk cache of compiled kernels: one file per key, holding a checked header and the
// compiled bytes (an object file for the CPU backend; the format does not care).
//
// Entries are written atomically (temp file in the same directory, fsync, rename), so any
// number of threads and processes may compile and store the same kernel at once: a reader
// sees either no entry or a whole one. A damaged entry (bad magic, version, size or checksum)
// is reported as `damaged`, which callers treat as a miss and overwrite with a fresh store.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace towerjit::cpujit {

// Bump when the entry layout or anything the key does not capture changes; old entries then
// miss (their key differs) and are rebuilt.
inline constexpr std::uint32_t kCacheFormatVersion = 1;

// Hex SHA-256 of the parts (each length-prefixed, so ("ab","c") != ("a","bc")) and
// kCacheFormatVersion. Callers pass everything the compiled bytes depend on: source text,
// target, compiler version, flags.
std::string make_cache_key(std::initializer_list<std::string_view> parts);

// The CPU backend's payload: several object files, each as its size (8 little-endian bytes)
// and its bytes. unpack_objects returns none for bytes pack_objects did not write (a size past
// the end, a partial size), and the caller compiles afresh.
std::string pack_objects(const std::vector<std::string>& objects);
std::vector<std::string> unpack_objects(std::string_view payload);

class CompileCache {
 public:
  enum class Status { hit, miss, damaged };
  struct Lookup {
    Status status = Status::miss;
    std::string payload;  // the stored bytes when status == hit, else empty
  };

  // A cache rooted at `dir`; the directory is created on the first store.
  explicit CompileCache(std::string dir) : dir_(std::move(dir)) {}

  // The cache the knobs ask for ($TOWERJIT_CACHE_DIR, $XDG_CACHE_HOME/towerjit, ...), or
  // nullopt when TOWERJIT_CACHE=off.
  static std::optional<CompileCache> from_knobs();

  Lookup load(const std::string& key) const;

  // Writes the entry atomically, replacing any existing one. Returns false (leaving no
  // partial file behind) when the directory or file cannot be written; a cache that cannot
  // store must never fail a compile. First removes the temporary files of stores that
  // processes of this machine, now dead, left unfinished (<entry>.tmp.<host>.<pid>.<n>).
  bool store(const std::string& key, std::string_view payload) const;

  std::string entry_path(const std::string& key) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace towerjit::cpujit
