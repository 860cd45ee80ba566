// A dataset of your own arrays, under any names (PyTorch's TensorDataset): every array's first
// dimension counts the examples, and a BatchPipeline batches and shuffles all of them alike,
// each batch feeding the arrays under their own names. One array may be named the label, which
// evaluation (EvalHook, trainer.evaluate) scores the logits against.
#pragma once

#include <cstdint>
#include <optional>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "runtime/data/fashion_mnist.h"
#include "runtime/host_tensor.h"

namespace towerjit::data {

// Which arrays of an .npz archive make a dataset (TensorDataset::from_npz).
struct NpzColumns {
  std::string features;                // the features' array, e.g. "x_train"
  std::string labels = "";             // the labels' array, e.g. "y_train" (empty: no labels)
  std::string feature_name = "image";  // the feeds they become, as the model's inputs name them
  std::string label_name = "label";
  // The features are f32, multiplied by this. By default a uint8 array (pixels) is scaled by
  // 1/255 to [0, 1], as torchvision's ToTensor does, and any other by 1.
  std::optional<double> scale = std::nullopt;
  bool flatten = false;  // features [N, d1, d2, ...] as [N, d1 * d2 * ...] (an MLP's input)
};

class TensorDataset {
 public:
  // A dataset of two arrays of an .npz archive (runtime/data/npz.h reads it): the features as
  // f32 (integers converted exactly, uint8 scaled as NpzColumns says) under `feature_name`, the
  // labels as i32 under `label_name`, which is the label. Errors (at `loc`): the archive's own;
  // an array it lacks (naming those it has); float labels (convert them with astype(int32));
  // an integer feature beyond 2^24 (not exact in f32); and the constructor's.
  static TensorDataset from_npz(const std::string& path, const NpzColumns& columns, Loc loc = Loc::current());

  // `arrays` by feed name (f32 or i32, rank 1 or more). The label is the array named "label"
  // if there is one; a dataset without labels (an autoencoder's) is fine until something
  // asks for them. Errors (towerjit::Error, at `loc`): no arrays, a scalar array, an array
  // whose values do not fill its shape, arrays that disagree on the example count (naming both
  // arrays and both counts).
  explicit TensorDataset(HostFeeds arrays, Loc loc = Loc::current());
  // The same with the label named: `label` must be one of the arrays.
  TensorDataset(HostFeeds arrays, std::string label, Loc loc = Loc::current());
  // Fashion-MNIST's (or any MNIST-format) Dataset as arrays "image" and "label".
  explicit TensorDataset(Dataset data, Loc loc = Loc::current());

  int64_t size() const { return size_; }
  const HostFeeds& arrays() const { return arrays_; }
  const HostTensor& array(const std::string& name, Loc loc = Loc::current()) const;
  const std::string& label_name() const { return label_; }
  bool has_labels() const { return arrays_.count(label_) > 0; }
  // The label array. Errors: the dataset has none (naming its arrays and how to name one).
  const HostTensor& labels(Loc loc = Loc::current()) const;
  // Every array but the label: what predict() and evaluate() take as inputs (a copy).
  HostFeeds inputs() const;

 private:
  HostFeeds arrays_;
  std::string label_;
  int64_t size_ = 0;
};

// What a BatchPipeline reads: named arrays (not owned) that agree on the example count.
struct DatasetView {
  std::vector<std::pair<std::string, const HostTensor*>> arrays;
  int64_t examples = 0;
  int64_t size() const { return examples; }
};

// A Dataset as "image" and "label". Errors (at `loc`): a non-empty dataset whose images are not
// f32 [N, features] or whose labels are not i32 [N].
DatasetView view_of(const Dataset& data, Loc loc);
DatasetView view_of(const TensorDataset& data);

// Rows `indices` of every array, as feeds of the same names.
HostFeeds gather_rows(const DatasetView& data, const std::vector<int64_t>& indices);

}  // namespace towerjit::data
