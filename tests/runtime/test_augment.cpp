// Random crop and horizontal flip as a pipeline transform: exact pixels against the draws,
// determinism per (seed, epoch, batch index), labels untouched.
#include <catch2/catch.hpp>
#include <cstring>

#include "towerjit.h"

// Where each mistake below is reported: the line of this file that made it (checked as the
// file, the line being the call's).
static const std::string here = "tests/runtime/test_augment.cpp:";

namespace tj = towerjit;
using Catch::Matchers::Contains;

namespace {

// `n` distinct images [n, C*H*W]: pixel (i, c, y, x) = 1 + i*1000 + c*100 + y*10 + x.
tj::HostTensor images(int64_t n, int64_t c, int64_t h, int64_t w) {
  tj::HostTensor t({n, c * h * w});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x)
          t.f32[((i * c + k) * h + y) * w + x] = static_cast<float>(1 + i * 1000 + k * 100 + y * 10 + x);
  return t;
}

tj::data::Batch batch_of(tj::HostTensor image, int64_t epoch, int64_t index) {
  tj::data::Batch b{.epoch = epoch, .index = index, .batches_in_epoch = 10, .feeds = {}};
  tj::HostTensor label({image.shape[0]}, tj::DType::i32);
  for (int64_t i = 0; i < label.size(); ++i) label.i32[i] = static_cast<int32_t>(7 * i);
  b.feeds = {{"image", std::move(image)}, {"label", label}};
  return b;
}

}  // namespace

TEST_CASE("a random crop shifts each image by its drawn offset, with zeros from the padding", "[data][augment]") {
  const int64_t n = 16, c = 2, h = 5, w = 6;
  const tj::data::AugmentOptions o{.crop_pad = 2, .height = h, .width = w, .seed = 9};
  tj::data::Batch b = batch_of(images(n, c, h, w), 3, 4);
  const tj::HostTensor before = b.feeds.at("image"), labels = b.feeds.at("label");
  tj::data::augment(o)(b);
  const tj::HostTensor& after = b.feeds.at("image");
  bool some_shift = false;
  for (int64_t i = 0; i < n; ++i) {
    const tj::data::AugmentDraw d = tj::data::augment_draw(o, 3, 4, i);
    CHECK(d.dy >= -2);
    CHECK(d.dy <= 2);
    CHECK(d.dx >= -2);
    CHECK(d.dx <= 2);
    CHECK_FALSE(d.flip);
    some_shift = some_shift || d.dy != 0 || d.dx != 0;
    for (int64_t k = 0; k < c; ++k)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) {
          const int64_t sy = y + d.dy, sx = x + d.dx;
          // The hand computation: the source pixel's value by the numbering, 0 in the padding.
          const float want = sy >= 0 && sy < h && sx >= 0 && sx < w
                                 ? static_cast<float>(1 + i * 1000 + k * 100 + sy * 10 + sx)
                                 : 0.0f;
          INFO("image " << i << " channel " << k << " y " << y << " x " << x << " dy " << d.dy << " dx " << d.dx);
          CHECK(after.f32[((i * c + k) * h + y) * w + x] == want);
        }
  }
  CHECK(some_shift);
  CHECK(b.feeds.at("label").i32 == labels.i32);  // labels untouched
  CHECK(after.shape == before.shape);
}

TEST_CASE("a flip mirrors left to right, and the same draws twice give the image back", "[data][augment]") {
  const int64_t n = 32, h = 4, w = 5;
  const tj::data::AugmentOptions o{.flip = true, .height = h, .width = w};
  tj::data::Batch b = batch_of(images(n, 1, h, w), 0, 2);
  const tj::HostTensor before = b.feeds.at("image");
  const auto transform = tj::data::augment(o);
  transform(b);
  int flipped = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool flip = tj::data::augment_draw(o, 0, 2, i).flip;
    flipped += flip;
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x)
        CHECK(b.feeds.at("image").f32[(i * h + y) * w + x] == before.f32[(i * h + y) * w + (flip ? w - 1 - x : x)]);
  }
  CHECK(flipped > 0);
  CHECK(flipped < n);
  transform(b);  // the same (seed, epoch, index): the same images flipped again
  CHECK(b.feeds.at("image").f32 == before.f32);
}

TEST_CASE("augmentation is a pure function of (seed, epoch, batch index)", "[data][augment]") {
  const tj::data::AugmentOptions o{.crop_pad = 2, .flip = true, .height = 6, .width = 6, .seed = 5};
  const auto transform = tj::data::augment(o);
  auto run = [&](int64_t epoch, int64_t index, uint64_t seed) {
    tj::data::AugmentOptions with = o;
    with.seed = seed;
    tj::data::Batch b = batch_of(images(8, 1, 6, 6), epoch, index);
    tj::data::augment(with)(b);
    return b.feeds.at("image").f32;
  };
  CHECK(run(1, 3, 5) == run(1, 3, 5));
  CHECK(run(1, 3, 5) != run(1, 4, 5));
  CHECK(run(1, 3, 5) != run(2, 3, 5));
  CHECK(run(1, 3, 5) != run(1, 3, 6));

  // Through the pipeline: a pipeline started mid-run gives the batch an uninterrupted one gave.
  tj::data::Dataset data{images(40, 1, 6, 6), tj::HostTensor({40}, tj::DType::i32)};
  const tj::data::PipelineOptions po{.batch = 8, .seed = 2, .transform = transform};
  tj::data::BatchPipeline whole(data, po);
  std::vector<float> seventh;
  for (int i = 0; i < 7; ++i) seventh = whole.next().feeds.at("image").f32;
  tj::data::BatchPipeline resumed(data, po, {1, 1});  // batch 6 = epoch 1, index 1
  CHECK(resumed.next().feeds.at("image").f32 == seventh);
}

TEST_CASE("augmentation takes NCHW images from their shape and names bad geometry", "[data][augment]") {
  // [n, C, H, W]: the same pixels as the flat layout.
  tj::HostTensor flat = images(4, 3, 5, 5), nchw = flat;
  nchw.shape = tj::Shape{4, 3, 5, 5};
  tj::data::Batch a = batch_of(flat, 0, 0), b = batch_of(nchw, 0, 0);
  tj::data::augment({.crop_pad = 1, .flip = true, .height = 5, .width = 5})(a);
  tj::data::augment({.crop_pad = 1, .flip = true})(b);
  CHECK(a.feeds.at("image").f32 == b.feeds.at("image").f32);

  tj::data::Batch c = batch_of(images(2, 1, 5, 5), 0, 0);
  const int line = __LINE__ + 1;
  const auto no_size = tj::data::augment({.flip = true});
  CHECK_THROWS_WITH(no_size(c), Contains("holds flat images; give their size") &&
                                    Contains("test_augment.cpp:" + std::to_string(line)));
  CHECK_THROWS_WITH(tj::data::augment({.flip = true, .height = 4, .width = 4})(c), Contains("not a whole number of 4x4 images") && Catch::Contains(here));
  CHECK_THROWS_WITH(tj::data::augment({.flip = true, .height = 4})(b), Contains("holds 5x5 images, not 4x0") && Catch::Contains(here));
  CHECK_THROWS_WITH(tj::data::augment({.feed = "pixels"})(c), Contains("the batch has no feed \"pixels\"") && Catch::Contains(here));
  CHECK_THROWS_WITH(tj::data::augment({.crop_pad = -1}), Contains("must not be negative") && Catch::Contains(here));
  // An error in the transform surfaces from next() when that batch is due.
  tj::data::Dataset data{images(8, 1, 5, 5), tj::HostTensor({8}, tj::DType::i32)};
  tj::data::BatchPipeline p(data, {.batch = 4, .transform = no_size});
  CHECK_THROWS_WITH(p.next(), Contains("give their size") && Catch::Contains(here));
}
