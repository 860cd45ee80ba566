// Writes the seed inputs of fuzz/corpus/ from the project's own writers, so every seed is a
// file towerjit really produces (encode_checkpoint, save_checkpoint's directory, the compile
// cache's store and pack_objects), with the target's mode byte in front. Usage:
//   fuzz_make_seeds <fuzz/corpus>
// Run again after a format change; the graph builder's seeds are byte strings, written here
// with what each one builds.
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "jit/cpu/compile_cache.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_format.h"

namespace fs = std::filesystem;
namespace tj = towerjit;

namespace {

void put(const fs::path& file, char mode, const std::string& bytes) {
  fs::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary) << mode << bytes;
}

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

// IDX bytes as the MNIST files hold them: magic 00 00 08 <rank>, big-endian dims, the bytes.
std::string idx(std::vector<uint32_t> dims) {
  std::string out = {0, 0, 8, static_cast<char>(dims.size())};
  size_t n = 1;
  for (uint32_t d : dims) out += be32(d), n *= d;
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<char>(i * 37));
  return out;
}

std::string gzip(const std::string& bytes) {
  const std::string tmp = (fs::temp_directory_path() / "towerjit-seed.gz").string();
  gzFile f = gzopen(tmp.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
  std::ifstream in(tmp, std::ios::binary);
  std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove(tmp);
  return out;
}

void idx_seeds(const fs::path& dir) {
  put(dir / "labels", 0, idx({5}));
  put(dir / "images", 0, idx({2, 3, 2}));
  put(dir / "labels-compressed-by-target", 1, idx({4}));
  put(dir / "images-gzip", 0, gzip(idx({1, 2, 2})));
  put(dir / "empty-images", 0, idx({0, 28, 28}));
}

tj::Checkpoint small_checkpoint() {
  tj::Checkpoint c{.step = 7, .position = {.epoch = 1, .batch = 2}};
  c.metadata = {{"model", "mlp"}, {"strategy", "sync"}};
  tj::HostTensor w(tj::Shape{2, 3});
  for (int i = 0; i < 6; ++i) w.f32[i] = 0.5f * static_cast<float>(i) - 1;
  tj::HostTensor step(tj::Shape{}, tj::DType::i32);
  step.i32[0] = 7;
  tj::HostTensor empty(tj::Shape{0, 4});
  c.variables = {{"fc/kernel", w}, {"global_step", step}, {"pad/empty", empty}};
  return c;
}

void checkpoint_seeds(const fs::path& dir) {
  const std::string bytes = tj::encode_checkpoint(small_checkpoint(), {});
  put(dir / "checkpoint", 0, bytes);
  put(dir / "checkpoint-fixed-up", 1, bytes);
  put(dir / "no-variables", 1, tj::encode_checkpoint(tj::Checkpoint{}, {}));
  // A directory whose `latest` names ckpt-1.tjck and an older one.
  put(dir / "directory", 2, std::string("ckpt-1.tjck\nckpt-0.tjck\n") + '\0' + bytes);
}

void cache_seeds(const fs::path& dir) {
  const fs::path scratch = fs::temp_directory_path() / "towerjit-seed-cache";
  const tj::cpujit::CompileCache cache(scratch.string());
  const std::string key = tj::cpujit::make_cache_key({"seed"});
  const std::string payload = tj::cpujit::pack_objects({"\x7f" "ELF object one", "object two"});
  cache.store(key, payload);
  std::ifstream in(cache.entry_path(key), std::ios::binary);
  put(dir / "entry", 0, std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
  put(dir / "payload", 1, payload);
  put(dir / "empty-payload", 1, "");
  fs::remove_all(scratch);
}

// The graph builder's bytes (fuzz/graph_builder.cpp): the batch byte (passed as put's mode),
// the first input's shape (rank, dims from {B, 1, 2, 3, 5, 0, 4, 1}), then per call an op byte
// (0 input, 1..10 where .. broadcast_to, 11..20 the unary ops, 21..28 the binary ops, 29..40
// matmul, dense, conv2d, pool, softmax, log_softmax, logsumexp, cast, argmax, concat, pad,
// grad) and its arguments; an axis byte k means axis k % 10 - 5.
void graph_seeds(const fs::path& dir) {
  const auto bytes = [](std::vector<int> v) { return std::string(v.begin(), v.end()); };
  // x [B, 3]; tanh(x); sum over axis 1.
  put(dir / "tanh-sum", 1, bytes({2, 0, 3, 13, 0, 0, 4, 1, 1, 6, 0}));
  // x [B, 3]; dense(x, 2); softmax over the last axis.
  put(dir / "dense-softmax", 0, bytes({2, 0, 3, 30, 0, 1, 0, 33, 1, 4}));
  // x [B, 3]; y = x * x; grad of sum(y^2) with respect to x.
  put(dir / "mul-grad", 2, bytes({2, 0, 3, 23, 0, 0, 0, 40, 1, 0, 0}));
  // x [1]; y [1, 2, 4, 4]; conv2d(y, 2 filters, 3x3); max pool 2x2.
  put(dir / "conv-pool", 0, bytes({1, 1, 0, 4, 1, 2, 6, 6, 0, 31, 1, 1, 2, 0, 0, 0, 32, 2, 2, 0, 0, 1}));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <fuzz/corpus>\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  idx_seeds(root / "idx_reader");
  checkpoint_seeds(root / "checkpoint_reader");
  cache_seeds(root / "compile_cache_entry");
  graph_seeds(root / "graph_builder");
  return 0;
}
