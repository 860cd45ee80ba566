#include "jit/cpu/compile_cache.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include <llvm/Support/SHA256.h>
#include <llvm/Support/xxhash.h>

#include "jit/knobs.h"

namespace towerjit::cpujit {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'T', 'J', 'C', 'A', 'C', 'H', 'E', '\0'};

// Host byte order: the key already includes the target, so an entry is only ever read by a
// machine of the same kind that wrote it.
struct Header {
  char magic[8];
  std::uint32_t format_version;
  std::uint32_t reserved;
  std::uint64_t payload_size;
  std::uint64_t payload_checksum;
};
static_assert(sizeof(Header) == 32);

std::uint64_t checksum(std::string_view bytes) {
  return llvm::xxh3_64bits(llvm::StringRef(bytes.data(), bytes.size()));
}

// Writes all of `bytes`, retrying short writes and EINTR.
bool write_all(int fd, const char* bytes, std::size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, bytes, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

// Makes the rename itself durable; failure here only costs durability, not correctness.
void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// This machine's name, as temporary files carry it: a cache shared over NFS is written by
// processes of several machines, whose pids mean nothing here.
std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  std::string host(name);
  for (char& c : host)
    if (c == '.' || c == '/') c = '_';
  return host;
}

// A name no other thread or process is using at the same moment:
// <entry>.tmp.<host>.<pid>.<n>.
std::string temp_name(const std::string& final_path) {
  static std::atomic<std::uint64_t> counter{0};
  return final_path + ".tmp." + host_name() + "." + std::to_string(::getpid()) + "." +
         std::to_string(counter.fetch_add(1));
}

// Removes the temporary files that stores of dead processes of this machine left (a compile
// killed mid-store): nothing reads them, and nothing else would ever delete them.
void remove_stale_temporaries(const std::string& dir) {
  const std::string mark = ".tjc.tmp." + host_name() + ".";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const std::size_t at = name.find(mark);
    if (at == std::string::npos) continue;
    const long pid = std::strtol(name.c_str() + at + mark.size(), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) fs::remove(entry.path(), ec);
  }
}

}  // namespace

std::string make_cache_key(std::initializer_list<std::string_view> parts) {
  llvm::SHA256 sha;
  auto add = [&](std::string_view part) {
    std::uint64_t size = part.size();
    sha.update(llvm::ArrayRef<std::uint8_t>(reinterpret_cast<const std::uint8_t*>(&size),
                                            sizeof(size)));
    sha.update(llvm::StringRef(part.data(), part.size()));
  };
  add("towerjit-cache-format-" + std::to_string(kCacheFormatVersion));
  for (std::string_view part : parts) add(part);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (std::uint8_t byte : sha.final()) {
    hex.push_back(kHex[byte >> 4]);
    hex.push_back(kHex[byte & 15]);
  }
  return hex;
}

std::string pack_objects(const std::vector<std::string>& objects) {
  std::string out;
  for (const std::string& o : objects) {
    for (int b = 0; b < 8; ++b) out.push_back(static_cast<char>((o.size() >> (8 * b)) & 0xff));
    out += o;
  }
  return out;
}

std::vector<std::string> unpack_objects(std::string_view payload) {
  std::vector<std::string> objects;
  size_t at = 0;
  while (at < payload.size()) {
    if (payload.size() - at < 8) return {};
    uint64_t size = 0;
    for (int b = 0; b < 8; ++b) size |= uint64_t{static_cast<unsigned char>(payload[at + b])} << (8 * b);
    at += 8;
    if (size > payload.size() - at) return {};
    objects.emplace_back(payload.substr(at, size));
    at += size;
  }
  return objects;
}

std::optional<CompileCache> CompileCache::from_knobs() {
  if (!knobs::cache_enabled()) return std::nullopt;
  return CompileCache(knobs::cache_dir());
}

std::string CompileCache::entry_path(const std::string& key) const {
  return (fs::path(dir_) / (key + ".tjc")).string();
}

CompileCache::Lookup CompileCache::load(const std::string& key) const {
  std::ifstream in(entry_path(key), std::ios::binary);
  if (!in) return {Status::miss, {}};
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return {Status::damaged, {}};

  Header header;
  if (bytes.size() < sizeof(Header)) return {Status::damaged, {}};
  std::memcpy(&header, bytes.data(), sizeof(Header));
  std::string_view payload(bytes.data() + sizeof(Header), bytes.size() - sizeof(Header));
  bool ok = std::memcmp(header.magic, kMagic, sizeof(kMagic)) == 0 &&
            header.format_version == kCacheFormatVersion &&
            header.payload_size == payload.size() &&
            header.payload_checksum == checksum(payload);
  if (!ok) return {Status::damaged, {}};
  return {Status::hit, std::string(payload)};
}

bool CompileCache::store(const std::string& key, std::string_view payload) const {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return false;
  // Here, after a compile (a miss), the directory scan costs little beside it.
  remove_stale_temporaries(dir_);

  Header header;
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.format_version = kCacheFormatVersion;
  header.reserved = 0;
  header.payload_size = payload.size();
  header.payload_checksum = checksum(payload);

  const std::string final_path = entry_path(key);
  const std::string tmp_path = temp_name(final_path);
  int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = write_all(fd, reinterpret_cast<const char*>(&header), sizeof(header)) &&
            write_all(fd, payload.data(), payload.size()) && ::fsync(fd) == 0;
  ok = (::close(fd) == 0) && ok;
  // rename() replaces atomically: concurrent writers of the same key each install a whole,
  // identical entry, and readers never see a partial one.
  if (ok) ok = ::rename(tmp_path.c_str(), final_path.c_str()) == 0;
  if (!ok) {
    ::unlink(tmp_path.c_str());
    return false;
  }
  fsync_dir(dir_);
  return true;
}

}  // namespace towerjit::cpujit
