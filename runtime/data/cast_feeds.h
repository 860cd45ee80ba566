// Inputs stored in 16 bits, converted on the pipeline's worker threads: a ready-made
// PipelineOptions::transform that rounds named f32 arrays of each batch to bf16 or f16 (to
// nearest, ties to even, as dsl/half_float.h defines), for a model whose inputs are declared
// so (`input("image", {kBatch, 784}, DType::bf16)`): half the bytes fed, and no conversion on
// the training thread.
//
//   tj::data::BatchPipeline batches(train, {.batch = 128,
//       .transform = tj::data::cast_feeds({{"image", tj::DType::bf16}})});
//
// With augmentation too, run it last: `.transform = [a = augment(...), c = cast_feeds(...)]
// (tj::data::Batch& b) { a(b); c(b); }`.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "dsl/dtype.h"
#include "runtime/data/batch_pipeline.h"

namespace towerjit::data {

// Each named feed, which must be an f32 array of the batch, rounded to its dtype (bf16 or f16).
// Errors (towerjit::Error, at `loc` when built; at the batch's next() when applied): a dtype
// that is not bf16 or f16; a feed the batch lacks, or one that is not f32.
std::function<void(Batch&)> cast_feeds(std::map<std::string, DType> feeds, Loc loc = Loc::current());

}  // namespace towerjit::data
