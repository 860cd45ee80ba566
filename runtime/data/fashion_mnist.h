// Fashion-MNIST (or any directory in MNIST's layout): 28x28 grey images in 10 classes.
#pragma once

#include <cstdint>
#include <source_location>
#include <string>
#include <vector>

#include "runtime/host_tensor.h"

namespace towerjit {
using Loc = std::source_location;
}

namespace towerjit::data {

// Where Debian's dataset-fashion-mnist installs the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct Dataset {
  HostTensor images;  // f32 [N, 784], pixels in [0, 1]
  HostTensor labels;  // i32 [N]
  int64_t size() const { return labels.size(); }
};

// split: "train" (60000) or "test" (10000). Files: <dir>/{train,t10k}-{images-idx3,labels-idx1}
// -ubyte[.gz]. Errors name the missing file and the package that provides it.
Dataset load_mnist_format(const std::string& split, const std::string& dir = kFashionMnistDir,
                          Loc loc = Loc::current());

// Rows `indices` of a dataset, as feeds named "image" and "label".
void gather_batch(const Dataset& data, const std::vector<int64_t>& indices, HostTensor& images,
                  HostTensor& labels);

}  // namespace towerjit::data
