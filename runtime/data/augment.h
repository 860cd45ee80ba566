// Data augmentation for image batches, as a ready-made PipelineOptions::transform:
//
//   tj::data::BatchPipeline batches(train, {.batch = 128, .seed = 1,
//       .transform = tj::data::augment({.crop_pad = 2, .flip = true, .height = 28, .width = 28})});
//
// Each image is padded with `crop_pad` zero pixels on every side and cropped back to its size
// at a random offset (torchvision's RandomCrop(size, padding)), then mirrored left to right
// with probability 1/2 (RandomHorizontalFlip). The draws come from Philox keyed by (seed,
// epoch, batch index, example in the batch), so a batch is augmented the same way on every
// machine and thread count, and a run resumed from a checkpoint sees the data an
// uninterrupted one saw (the transform contract of batch_pipeline.h). Only the image feed
// changes; labels and other arrays are untouched.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "runtime/data/batch_pipeline.h"

namespace towerjit::data {

struct AugmentOptions {
  int64_t crop_pad = 0;  // zero pixels added on every side before the crop; 0: no crop
  bool flip = false;     // mirror left to right with probability 1/2
  // Each image's size. Flat images ([n, C*H*W], channels first) need both; for [n, H, W] or
  // [n, C, H, W] feeds 0 takes them from the shape (a value given must agree with it).
  int64_t height = 0;
  int64_t width = 0;
  std::string feed = "image";  // the array to augment
  uint64_t seed = 1;           // with the epoch and the batch index, keys every draw
};

// What augmentation does to one example: out[c][y][x] = in[c][y + dy][x + dx] (0 outside the
// image), then, with `flip`, out[c][y][x] = that[c][y][W - 1 - x].
struct AugmentDraw {
  int64_t dy = 0, dx = 0;  // in [-crop_pad, crop_pad]
  bool flip = false;
};

// The draw for example `example` of batch `index` of epoch `epoch`.
AugmentDraw augment_draw(const AugmentOptions& options, int64_t epoch, int64_t index, int64_t example);

// The transform. Errors (towerjit::Error at `loc`): here, a negative crop_pad, height or
// width; on the batch (raised by BatchPipeline::next()), a missing feed, a feed that is not
// f32, flat images without height and width or whose rows are not a whole number of
// height x width images, a height or width that disagrees with the feed's shape.
std::function<void(Batch&)> augment(AugmentOptions options, Loc loc = Loc::current());

// Applies the draws of batch (epoch, index) to `images` in place, as the transform does.
void augment_images(HostTensor& images, const AugmentOptions& options, int64_t epoch, int64_t index,
                    Loc loc = Loc::current());

}  // namespace towerjit::data
