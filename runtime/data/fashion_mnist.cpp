#include "runtime/data/fashion_mnist.h"

#include <cstring>
#include <filesystem>
#include <source_location>

#include "dsl/error.h"
#include "runtime/data/idx.h"

namespace towerjit::data {
namespace {

std::string find_file(const std::string& dir, const std::string& stem) {
  for (const std::string& name : {stem + ".gz", stem})
    if (std::filesystem::exists(dir + "/" + name)) return dir + "/" + name;
  return dir + "/" + stem + ".gz";  // read_idx reports it missing
}

}  // namespace

Dataset load_mnist_format(const std::string& split, const std::string& dir, Loc loc) {
  user_check(split == "train" || split == "test", loc)
      << "unknown split \"" << split << "\"; use \"train\" or \"test\"";
  const std::string prefix = split == "train" ? "train" : "t10k";
  const std::string hint = dir == kFashionMnistDir
                               ? "install Debian's dataset-fashion-mnist (scripts/install-deps.sh does)"
                               : "point --data at a directory in MNIST's layout (Debian's "
                                 "dataset-fashion-mnist installs one in " + std::string(kFashionMnistDir) + ")";
  user_check(std::filesystem::is_directory(dir), loc)
      << "data directory \"" << dir << "\" does not exist; " << hint;
  Dataset d{read_idx(find_file(dir, prefix + "-images-idx3-ubyte"), hint, loc),
            read_idx(find_file(dir, prefix + "-labels-idx1-ubyte"), hint, loc)};
  user_check(d.images.shape[0] == d.labels.size(), loc)
      << "\"" << dir << "\" has " << d.images.shape[0] << " " << split << " images but "
      << d.labels.size() << " labels; the files do not belong together: take both from one copy of "
      << "the dataset (its images and labels files of the same split)";
  return d;
}

void gather_batch(const Dataset& data, const std::vector<int64_t>& indices, HostTensor& images,
                  HostTensor& labels) {
  const int64_t n = static_cast<int64_t>(indices.size()), row = data.images.shape[1];
  images = HostTensor(Shape{n, row});
  labels = HostTensor(Shape{n}, DType::i32);
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(images.f32.data() + i * row, data.images.f32.data() + indices[i] * row, row * 4);
    labels.i32[i] = data.labels.i32[indices[i]];
  }
}

}  // namespace towerjit::data
