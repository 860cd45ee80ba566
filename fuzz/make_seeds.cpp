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
#include "runtime/data/npy.h"
#include "runtime/interop/safetensors_format.h"
#include "tests/runtime/interop_bytes.h"

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

// .npy files from encode_npy and by hand (a big-endian Fortran-order int64 array, a bool one),
// alone and in stored and deflated archives.
void npy_seeds(const fs::path& dir) {
  namespace tt = tj::testing;
  tj::HostTensor x(tj::Shape{3, 2});
  for (int i = 0; i < 6; ++i) x.f32[i] = 0.25f * static_cast<float>(i);
  const std::string f32 = tj::data::encode_npy(x);
  std::string i64;
  for (int i = 0; i < 6; ++i) i64 += tt::element_bytes(static_cast<int64_t>(i - 2), true);
  const std::string fortran =
      tt::npy_bytes("{'descr': '>i8', 'fortran_order': True, 'shape': (2, 3), }", i64);
  const std::string bools = tt::npy_bytes("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", "\x01\x00\x01");
  put(dir / "f32", 0, f32);
  put(dir / "fortran-big-endian-i64", 0, fortran);
  put(dir / "npz-stored", 1, tt::zip_bytes({{"x.npy", f32}, {"y.npy", bools}}, false));
  put(dir / "npz-deflated", 1, tt::zip_bytes({{"x.npy", fortran}, {"y.npy", bools}}, true));
  put(dir / "deflated-by-target", 2, bools);
}

// A file from encode_safetensors, and one by hand with the element types other writers use.
void safetensors_seeds(const fs::path& dir) {
  namespace tt = tj::testing;
  tj::SafetensorsFile file{{}, {{"format", "pt"}}};
  file.tensors["fc1.weight"] = tj::HostTensor(tj::Shape{3, 2});
  file.tensors["fc1.bias"] = tj::HostTensor(tj::Shape{3});
  file.tensors["step"] = tj::HostTensor(tj::Shape{}, tj::DType::i32);
  fs::create_directories(dir);
  std::ofstream(dir / "encoded", std::ios::binary) << tj::encode_safetensors(file, std::source_location::current());
  std::ofstream(dir / "other-types", std::ios::binary) << tt::safetensors_bytes(
      R"({"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"BF16","shape":[1],"data_offsets":[4,6]},)"
      R"("i":{"dtype":"I64","shape":[1],"data_offsets":[6,14]},"__metadata__":{"k":"\u00e9"}})",
      std::string(14, '\x01'));
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
  npy_seeds(root / "npy_reader");
  safetensors_seeds(root / "safetensors_reader");
  return 0;
}
