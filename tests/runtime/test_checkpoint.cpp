// Checkpoints: a bitwise round trip, `latest` and pruning, each kind of damage named in the
// error, a model that does not fit, and a failed save that leaves the previous one loadable.
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>

#include "dsl/error.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_format.h"
#include "tests/jit/cpu_test_env.h"

namespace tj = towerjit;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

using towerjit::test::TempDir;  // tests/jit/cpu_test_env.h

float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

tj::Checkpoint sample(int64_t step = 1200) {
  tj::Checkpoint c;
  c.step = step;
  c.position = {3, 17};
  tj::HostTensor kernel(tj::Shape{2, 3});
  kernel.f32 = {1.5f, -0.0f, from_bits(0x7fc01234), from_bits(0xffa00001),  // NaNs with payloads
                std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min()};
  c.variables["fc1/kernel"] = kernel;
  c.variables["fc1/bias"] = tj::HostTensor(tj::Shape{3});
  c.variables["fc1/bias"].f32 = {0.25f, -1e30f, 7};
  tj::HostTensor global_step(tj::Shape{}, tj::DType::i32);
  global_step.i32 = {static_cast<int32_t>(step)};
  c.variables["global_step"] = global_step;
  c.variables["empty"] = tj::HostTensor(tj::Shape{0, 4});
  c.metadata = {{"model", "784-256-10 MLP"}, {"strategy", "sync_average on cpu:0,cpu:1"}, {"", ""}};
  return c;
}

bool same_bits(const tj::HostTensor& a, const tj::HostTensor& b) {
  return a.shape == b.shape && a.dtype == b.dtype && a.f32.size() == b.f32.size() && a.i32.size() == b.i32.size() &&
         (a.size() == 0 || std::memcmp(a.data(), b.data(), static_cast<size_t>(a.size()) * 4) == 0);
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The names in a directory other than `latest`, sorted.
std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename() != "latest") names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("a checkpoint reads back bit for bit", "[checkpoint]") {
  TempDir dir;
  const auto saved = sample();
  const std::string path = tj::save_checkpoint(dir.str(), saved);
  CHECK(path == dir / "ckpt-1200.tjck");
  for (const std::string& from : {path, dir.str()}) {
    const auto loaded = tj::load_checkpoint(from);
    CHECK(loaded.step == 1200);
    CHECK(loaded.position == tj::data::PipelinePosition{3, 17});
    CHECK(loaded.metadata == saved.metadata);
    REQUIRE(loaded.variables.size() == saved.variables.size());
    for (const auto& [name, t] : saved.variables) {
      INFO(name);
      REQUIRE(loaded.variables.count(name));
      CHECK(same_bits(loaded.variables.at(name), t));
    }
    CHECK(std::signbit(loaded.variables.at("fc1/kernel").f32[1]));
  }
  // No metadata, no variables.
  tj::Checkpoint bare;
  bare.step = 0;
  tj::save_checkpoint(dir.str(), bare);
  const auto loaded = tj::load_checkpoint(dir.str());
  CHECK((loaded.step == 0 && loaded.metadata.empty() && loaded.variables.empty()));
  // Equal checkpoints are equal files.
  TempDir other;
  tj::save_checkpoint(other.str(), saved);
  CHECK(read_bytes(path) == read_bytes(other / "ckpt-1200.tjck"));
}

TEST_CASE("a checkpoint directory keeps the newest saves and latest names the last", "[checkpoint]") {
  TempDir dir;
  for (int64_t step = 1; step <= 5; ++step) tj::save_checkpoint(dir.str(), sample(step), /*keep=*/3);
  CHECK(listing(dir.str()) == std::vector<std::string>{"ckpt-3.tjck", "ckpt-4.tjck", "ckpt-5.tjck"});
  CHECK(first_line(dir / "latest") == "ckpt-5.tjck");
  CHECK(tj::load_checkpoint(dir.str()).step == 5);

  // Resumed from step 3 and saved at step 4 again: the new 4 replaces the old, and the
  // abandoned run's step 5 is the first to go.
  tj::save_checkpoint(dir.str(), sample(4), 3);
  CHECK(first_line(dir / "latest") == "ckpt-4.tjck");
  tj::save_checkpoint(dir.str(), sample(6), 3);
  tj::save_checkpoint(dir.str(), sample(7), 3);
  CHECK(listing(dir.str()) == std::vector<std::string>{"ckpt-4.tjck", "ckpt-6.tjck", "ckpt-7.tjck"});

  // Files it never wrote are left alone.
  write_bytes(dir / "notes.txt", "mine");
  tj::save_checkpoint(dir.str(), sample(8), 1);
  CHECK(listing(dir.str()) == std::vector<std::string>{"ckpt-8.tjck", "notes.txt"});

  // A missing directory is created.
  CHECK(tj::load_checkpoint(tj::save_checkpoint(dir / "a/b", sample(9))).step == 9);
}

TEST_CASE("a damaged checkpoint is named with what is wrong", "[checkpoint]") {
  TempDir dir;
  const std::string path = tj::save_checkpoint(dir.str(), sample());
  const std::string good = read_bytes(path);

  std::string flipped = good;
  flipped[good.size() / 2] ^= 0x10;
  write_bytes(path, flipped);
  // What (the file, the fault), where (the line that loaded it) and the fix, in every message.
  const std::string here = "tests/runtime/test_checkpoint.cpp:", earlier = "; load an earlier checkpoint";
  CHECK_THROWS_WITH(tj::load_checkpoint(path),
                    Contains(path + "\" is damaged: checksum mismatch") && Contains(earlier) && Contains(here));
  CHECK_THROWS_WITH(tj::load_checkpoint(dir.str()), Contains(path) && Contains("checksum mismatch"));

  write_bytes(path, good.substr(0, good.size() - 10));
  CHECK_THROWS_WITH(tj::load_checkpoint(path), Contains(path) && Contains("is truncated") && Contains(earlier) && Contains(here));
  write_bytes(path, good.substr(0, 10));
  CHECK_THROWS_WITH(tj::load_checkpoint(path), Contains("is truncated") && Contains(earlier) && Contains(here));

  write_bytes(path, "PK\x03\x04" + good.substr(4));
  CHECK_THROWS_WITH(tj::load_checkpoint(path), Contains(path) && Contains("is not a towerjit checkpoint") &&
                                                   Contains("pass a ckpt-<step>.tjck file") && Contains(here));
  write_bytes(path, "");
  CHECK_THROWS_WITH(tj::load_checkpoint(path), Contains("is not a towerjit checkpoint: it is empty"));

  std::string newer = good;
  newer[4] = 2;
  write_bytes(path, newer);
  CHECK_THROWS_WITH(tj::load_checkpoint(path), Contains("format version 2") && Contains("reads version 1") &&
                                                   Contains("load it with the towerjit that wrote it") && Contains(here));

  // Every truncation and every single flipped bit is an error, never a crash or a wrong load
  // (decoded in memory: the same code load_checkpoint runs on the file's bytes).
  for (size_t n = 0; n < good.size(); ++n) {
    REQUIRE_THROWS_AS(tj::decode_checkpoint(std::string_view(good).substr(0, n), path, {}), tj::Error);
    for (int bit = 0; bit < 8; ++bit) {
      std::string damaged = good;
      damaged[n] ^= static_cast<char>(1 << bit);
      REQUIRE_THROWS_AS(tj::decode_checkpoint(damaged, path, {}), tj::Error);
    }
  }

  CHECK_THROWS_WITH(tj::load_checkpoint(dir / "ckpt-9.tjck"), Contains("does not exist"));
  TempDir empty;
  CHECK_THROWS_WITH(tj::load_checkpoint(empty.str()), Contains("has no \"latest\" file"));
}

// `bytes` with the first `from` replaced by `to` (as long) and the CRC-32 set right again: damage
// that only the reader's checks of the contents can find.
static std::string replaced(std::string bytes, const std::string& from, const std::string& to) {
  bytes.replace(bytes.find(from), from.size(), to);
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size() - 4));
  for (int i = 0; i < 4; ++i) bytes[bytes.size() - 4 + i] = static_cast<char>(crc >> (8 * i));
  return bytes;
}

// Found by the checkpoint fuzz target (fuzz/regressions/checkpoint_reader/empty-shape-overflow):
// with a 0 dimension the size check was skipped, and the other dimensions overflowed int64.
TEST_CASE("a checkpoint variable of huge dimensions and a 0 is malformed, not an overflow", "[checkpoint]") {
  tj::Checkpoint c;
  c.variables = {{"e", tj::HostTensor(tj::Shape{1, 1, 0})}};
  const std::string good = tj::encode_checkpoint(c, {});
  auto le64 = [](uint64_t v) { std::string s; for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(v >> (8 * i))); return s; };
  const std::string dims = le64(1) + le64(1) + le64(0), huge = le64(uint64_t{1} << 40) + le64(uint64_t{1} << 40) + le64(0);
  CHECK_THROWS_WITH(tj::decode_checkpoint(replaced(good, dims, huge), "x.tjck", {}),
                    Contains("malformed: variable \"e\"'s shape [1099511627776,1099511627776,0] has more elements than a tensor can hold"));
  CHECK(tj::decode_checkpoint(good, "x.tjck", {}).variables.at("e").shape == tj::Shape{1, 1, 0});
}

// Found by the checkpoint fuzz target (fuzz/regressions/checkpoint_reader/metadata-out-of-order):
// keys out of order loaded, and a repeated key or variable name silently replaced or dropped
// an entry. The checksum is set right each time, so only the order is wrong.
TEST_CASE("a checkpoint with a name out of order or repeated is malformed", "[checkpoint]") {
  tj::Checkpoint c;
  c.metadata = {{"ka", "1"}, {"kb", "2"}};
  c.variables = {{"va", tj::HostTensor(tj::Shape{2})}, {"vb", tj::HostTensor(tj::Shape{2})}};
  const std::string good = tj::encode_checkpoint(c, {});
  auto renamed = [&](const std::string& from, const std::string& to) { return replaced(good, from, to); };
  CHECK(tj::decode_checkpoint(renamed("kb", "kc"), "x.tjck", {}).metadata.count("kc") == 1);
  CHECK_THROWS_WITH(tj::decode_checkpoint(renamed("kb", "ka"), "x.tjck", {}),
                    Contains("malformed: metadata key \"ka\" comes after \"ka\""));
  CHECK_THROWS_WITH(tj::decode_checkpoint(renamed("kb", "k0"), "x.tjck", {}),
                    Contains("malformed: metadata key \"k0\" comes after \"ka\""));
  CHECK_THROWS_WITH(tj::decode_checkpoint(renamed("vb", "va"), "x.tjck", {}),
                    Contains("malformed: variable \"va\" comes after \"va\""));
}

TEST_CASE("checkpoint check_matches names the first variable that does not fit", "[checkpoint]") {
  const auto c = sample();
  tj::HostVariables model = c.variables;
  CHECK_NOTHROW(tj::check_matches(c, model));

  auto missing = model;
  missing["fc2/kernel"] = tj::HostTensor(tj::Shape{3, 10});
  CHECK_THROWS_WITH(tj::check_matches(c, missing),
                    Contains("checkpoint lacks variable \"fc2/kernel\" (f32[3,10])") &&
                        Contains("test_checkpoint.cpp"));

  auto reshaped = model;
  reshaped["fc1/kernel"] = tj::HostTensor(tj::Shape{2, 4});
  CHECK_THROWS_WITH(tj::check_matches(c, reshaped),
                    Contains("\"fc1/kernel\" is f32[2,3] in the checkpoint but f32[2,4] in the model"));
  auto retyped = model;
  retyped["global_step"] = tj::HostTensor(tj::Shape{});
  CHECK_THROWS_WITH(tj::check_matches(c, retyped), Contains("is i32[] in the checkpoint but f32[] in the model"));

  auto fewer = model;
  fewer.erase("fc1/bias");
  CHECK_THROWS_WITH(tj::check_matches(c, fewer),
                    Contains("checkpoint has variable \"fc1/bias\" (f32[3]) that the model lacks"));
  fewer["fc2/kernel"] = tj::HostTensor(tj::Shape{3, 10});
  CHECK_THROWS_WITH(tj::check_matches(c, fewer), Contains("fc2/kernel") && Contains("and 1 more difference"));
}

TEST_CASE("a failed checkpoint save leaves the previous one loadable and no temporary file", "[checkpoint]") {
  TempDir dir;
  tj::save_checkpoint(dir.str(), sample(1));

  // A directory cannot be made under a regular file (root included, unlike chmod).
  write_bytes(dir / "file", "x");
  CHECK_THROWS_WITH(tj::save_checkpoint(dir / "file/ckpts", sample(2)),
                    Contains("cannot create checkpoint directory") && Contains("file/ckpts") &&
                        Contains("Not a directory"));
  CHECK_THROWS_WITH(tj::save_checkpoint(dir / "file", sample(2)), Contains("file"));

  // The rename fails when a non-empty directory holds the checkpoint's name.
  fs::create_directories(dir / "ckpt-2.tjck/x");
  CHECK_THROWS_WITH(tj::save_checkpoint(dir.str(), sample(2)), Contains("ckpt-2.tjck") && Contains("renaming"));
  CHECK(first_line(dir / "latest") == "ckpt-1.tjck");
  CHECK(listing(dir.str()) == std::vector<std::string>{"ckpt-1.tjck", "ckpt-2.tjck", "file"});
  CHECK(tj::load_checkpoint(dir.str()).step == 1);
}

TEST_CASE("save_checkpoint refuses what a checkpoint cannot store", "[checkpoint]") {
  TempDir dir;
  CHECK_THROWS_WITH(tj::save_checkpoint(dir.str(), sample(), 0), Contains("keep is 0"));
  CHECK_THROWS_WITH(tj::save_checkpoint(dir.str(), sample(-1)), Contains("step -1"));
  auto short_data = sample();
  short_data.variables["fc1/bias"].f32.pop_back();
  CHECK_THROWS_WITH(tj::save_checkpoint(dir.str(), short_data),
                    Contains("\"fc1/bias\": it holds 2 f32 elements but its shape [3] needs 3"));
  CHECK(listing(dir.str()).empty());
}
