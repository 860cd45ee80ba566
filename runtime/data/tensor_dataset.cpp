#include "runtime/data/tensor_dataset.h"

#include <cmath>
#include <cstring>

#include "dsl/error.h"
#include "runtime/data/npz.h"

namespace towerjit::data {
namespace {

std::string describe(const HostTensor& t) { return std::string(dtype_name(t.dtype)) + t.shape.str(); }

std::string names_of(const HostFeeds& arrays) {
  std::string out;
  for (const auto& [name, t] : arrays) out += (out.empty() ? "\"" : ", \"") + name + "\"";
  return out;
}

}  // namespace

TensorDataset::TensorDataset(HostFeeds arrays, Loc loc) : TensorDataset(std::move(arrays), "", loc) {}

TensorDataset::TensorDataset(HostFeeds arrays, std::string label, Loc loc)
    : arrays_(std::move(arrays)), label_(label.empty() ? "label" : label) {
  user_check(!arrays_.empty(), loc) << "a dataset needs at least one array; pass its arrays by feed name, e.g. "
                                       "{{\"image\", images}, {\"label\", labels}}";
  user_check(label.empty() || arrays_.count(label_), loc)
      << "the label array \"" << label_ << "\" is not one of the dataset's arrays (" << names_of(arrays_)
      << "); name one of them as the label";
  const std::string* first = nullptr;
  for (const auto& [name, t] : arrays_) {
    user_check(t.shape.rank() >= 1, loc)
        << "array \"" << name << "\" is a scalar; every array of a dataset has one row per example (its first "
        << "dimension counts them)";
    const size_t held = t.dtype == DType::f32 ? t.f32.size() : t.i32.size();
    user_check(held == static_cast<size_t>(t.size()), loc)
        << "array \"" << name << "\" is " << describe(t) << " (" << count_of(t.size(), "value") << ") but holds "
        << count_of(static_cast<long long>(held), "value") << "; build it as HostTensor(shape, dtype) and fill it";
    if (!first) {
      first = &name, size_ = t.shape[0];
      continue;
    }
    user_check(t.shape[0] == size_, loc)
        << "arrays \"" << *first << "\" and \"" << name << "\" disagree on the number of examples: \"" << *first
        << "\" has " << size_ << " (" << describe(arrays_.at(*first)) << "), \"" << name << "\" has " << t.shape[0]
        << " (" << describe(t) << "); the first dimension of every array counts the examples, so they must be equal";
  }
}

TensorDataset::TensorDataset(Dataset data, Loc loc)
    : TensorDataset(HostFeeds{{"image", std::move(data.images)}, {"label", std::move(data.labels)}}, "label",
                    loc) {}

TensorDataset TensorDataset::from_npz(const std::string& path, const NpzColumns& columns, Loc loc) {
  auto arrays = load_npz_arrays(path, loc);
  std::string names;
  for (const auto& [name, a] : arrays) names += (names.empty() ? "\"" : ", \"") + name + "\"";
  auto take = [&](const std::string& name, const char* role) {
    auto it = arrays.find(name);
    user_check(it != arrays.end(), loc) << "\"" << path << "\" has no array \"" << name << "\" for the " << role
                                        << " (its arrays: " << (names.empty() ? "none" : names)
                                        << "); name one of them in NpzColumns";
    return std::move(it->second);
  };
  NpyArray features = take(columns.features, "features");
  const double scale = columns.scale.value_or(features.stored == NpyType::u8 ? 1.0 / 255 : 1.0);
  HostTensor x(features.values.shape, DType::f32);
  if (columns.flatten && x.shape.rank() >= 1) x.shape = Shape{x.shape[0], x.shape[0] ? x.size() / x.shape[0] : 0};
  for (int64_t i = 0; i < x.size(); ++i) {
    if (features.values.dtype == DType::f32) {
      x.f32[i] = static_cast<float>(features.values.f32[i] * scale);
      continue;
    }
    const int32_t v = features.values.i32[i];
    user_check(std::abs(static_cast<int64_t>(v)) <= (1 << 24), loc)
        << "array \"" << columns.features << "\" of \"" << path << "\" holds the integer " << v << " at element " << i
        << ", which float32 features cannot hold exactly (beyond 2^24); scale it in numpy first";
    x.f32[i] = static_cast<float>(v * scale);
  }
  HostFeeds feeds{{columns.feature_name, std::move(x)}};
  if (!columns.labels.empty()) {
    NpyArray labels = take(columns.labels, "labels");
    user_check(labels.values.dtype == DType::i32, loc)
        << "array \"" << columns.labels << "\" of \"" << path << "\" holds " << npy_type_name(labels.stored)
        << " labels; labels are class numbers: save them with astype(numpy.int32)";
    feeds.emplace(columns.label_name, std::move(labels.values));
  }
  return columns.labels.empty() ? TensorDataset(std::move(feeds), loc)
                                : TensorDataset(std::move(feeds), columns.label_name, loc);
}

const HostTensor& TensorDataset::array(const std::string& name, Loc loc) const {
  auto it = arrays_.find(name);
  user_check(it != arrays_.end(), loc) << "the dataset has no array \"" << name << "\"; its arrays are "
                                       << names_of(arrays_);
  return it->second;
}

const HostTensor& TensorDataset::labels(Loc loc) const {
  auto it = arrays_.find(label_);
  user_check(it != arrays_.end(), loc)
      << "the dataset has no label array \"" << label_ << "\" (its arrays: " << names_of(arrays_)
      << "); name the label when building it: TensorDataset(arrays, \"<label array>\")";
  return it->second;
}

HostFeeds TensorDataset::inputs() const {
  HostFeeds out = arrays_;
  out.erase(label_);
  return out;
}

DatasetView view_of(const Dataset& data, Loc loc) {
  // An empty dataset is the pipeline's to report, in its own words.
  user_check(data.size() == 0 || (data.images.shape.rank() == 2 && data.images.dtype == DType::f32 &&
                                  data.images.shape[0] == data.size() && data.labels.dtype == DType::i32 &&
                                  data.labels.shape.rank() == 1),
             loc)
      << "the dataset's images " << describe(data.images) << " and labels " << describe(data.labels)
      << " do not belong together; images must be f32 [N, features] and labels i32 [N]";
  return {{{"image", &data.images}, {"label", &data.labels}}, data.size()};
}

DatasetView view_of(const TensorDataset& data) {
  DatasetView view{{}, data.size()};
  for (const auto& [name, t] : data.arrays()) view.arrays.emplace_back(name, &t);
  return view;
}

HostFeeds gather_rows(const DatasetView& data, const std::vector<int64_t>& indices) {
  const int64_t n = static_cast<int64_t>(indices.size());
  HostFeeds feeds;
  for (const auto& [name, array] : data.arrays) {
    Shape shape = array->shape;
    shape[0] = n;
    HostTensor out(shape, array->dtype);
    // Both dtypes are 4 bytes an element.
    const int64_t row = data.examples ? array->size() / data.examples * 4 : 0;
    const char* from = static_cast<const char*>(array->data());
    char* to = static_cast<char*>(out.data());
    for (int64_t i = 0; i < n; ++i) std::memcpy(to + i * row, from + indices[i] * row, row);
    feeds.emplace(name, std::move(out));
  }
  return feeds;
}

}  // namespace towerjit::data
