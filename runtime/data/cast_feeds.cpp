#include "runtime/data/cast_feeds.h"

#include "dsl/error.h"
#include "dsl/half_float.h"

namespace towerjit::data {

std::function<void(Batch&)> cast_feeds(std::map<std::string, DType> feeds, Loc loc) {
  for (const auto& [name, dtype] : feeds)
    user_check(is_half_float(dtype), loc) << "cast_feeds: \"" << name << "\" to " << dtype_name(dtype)
                                           << "; it rounds f32 inputs to DType::bf16 or DType::f16";
  return [feeds = std::move(feeds), loc](Batch& batch) {
    for (const auto& [name, dtype] : feeds) {
      const auto it = batch.feeds.find(name);
      user_check(it != batch.feeds.end(), loc)
          << "cast_feeds: the batch has no array \"" << name << "\"; name one of the dataset's arrays";
      const HostTensor& from = it->second;
      user_check(from.dtype == DType::f32, loc)
          << "cast_feeds: \"" << name << "\" is " << dtype_name(from.dtype) << from.shape.str()
          << "; it rounds f32 arrays only";
      HostTensor to(from.shape, dtype);
      for (int64_t i = 0; i < from.size(); ++i) to.b16[i] = half_bits(from.f32[i], dtype);
      it->second = std::move(to);
    }
  };
}

}  // namespace towerjit::data
