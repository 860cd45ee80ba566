#include "runtime/data/augment.h"

#include <algorithm>
#include <vector>

#include "dsl/error.h"
#include "dsl/philox.h"

namespace towerjit::data {
namespace {

// Its own Philox stream ("AUGM"), so a seed shared with the shuffle or the initial weights
// draws other numbers here.
constexpr uint32_t kAugmentStream = 0x4155'474D;

// Uniform in [0, bound) from 32 random bits (the bias, under bound / 2^32, is negligible for
// the few offsets a crop has).
int64_t below(uint32_t bits, int64_t bound) {
  return static_cast<int64_t>((static_cast<uint64_t>(bits) * static_cast<uint64_t>(bound)) >> 32);
}

struct Geometry {
  int64_t channels = 1, height = 0, width = 0;
};

Geometry geometry_of(const HostTensor& images, const AugmentOptions& o, Loc loc) {
  const Shape& s = images.shape;
  const std::string what = "augment: feed \"" + o.feed + "\" " + s.str();
  user_check(images.dtype == DType::f32, loc) << what << " is " << dtype_name(images.dtype)
                                              << "; augmentation works on f32 images";
  user_check(s.rank() >= 2 && s.rank() <= 4, loc)
      << what << " is not a batch of images; feed [n, C*H*W], [n, H, W] or [n, C, H, W]";
  Geometry g;
  if (s.rank() == 2) {
    user_check(o.height > 0 && o.width > 0, loc)
        << what << " holds flat images; give their size, e.g. augment({.height = 28, .width = 28, ...})";
    user_check(s[1] % (o.height * o.width) == 0, loc)
        << what << ": rows of " << s[1] << " values are not a whole number of " << o.height << "x" << o.width
        << " images; check height and width";
    g = {s[1] / (o.height * o.width), o.height, o.width};
  } else {
    g = {s.rank() == 4 ? s[1] : 1, s[s.rank() - 2], s[s.rank() - 1]};
    user_check((o.height == 0 || o.height == g.height) && (o.width == 0 || o.width == g.width), loc)
        << what << " holds " << g.height << "x" << g.width << " images, not " << o.height << "x" << o.width
        << " as the options say; drop height and width or give the feed's";
  }
  return g;
}

}  // namespace

AugmentDraw augment_draw(const AugmentOptions& o, int64_t epoch, int64_t index, int64_t example) {
  const PhiloxCounter bits =
      philox4x32_10({static_cast<uint32_t>(example), static_cast<uint32_t>(index), static_cast<uint32_t>(epoch),
                     kAugmentStream ^ static_cast<uint32_t>(epoch >> 32)},
                    {static_cast<uint32_t>(o.seed), static_cast<uint32_t>(o.seed >> 32)});
  AugmentDraw d;
  if (o.crop_pad > 0) {
    d.dy = below(bits[0], 2 * o.crop_pad + 1) - o.crop_pad;
    d.dx = below(bits[1], 2 * o.crop_pad + 1) - o.crop_pad;
  }
  d.flip = o.flip && (bits[2] >> 31) != 0;
  return d;
}

void augment_images(HostTensor& images, const AugmentOptions& o, int64_t epoch, int64_t index, Loc loc) {
  const Geometry g = geometry_of(images, o, loc);
  const int64_t n = images.shape[0], plane = g.height * g.width;
  std::vector<float> source(static_cast<size_t>(plane));
  for (int64_t i = 0; i < n; ++i) {
    const AugmentDraw d = augment_draw(o, epoch, index, i);
    if (d.dy == 0 && d.dx == 0 && !d.flip) continue;
    for (int64_t c = 0; c < g.channels; ++c) {
      float* image = images.f32.data() + (i * g.channels + c) * plane;
      std::copy(image, image + plane, source.begin());
      for (int64_t y = 0; y < g.height; ++y)
        for (int64_t x = 0; x < g.width; ++x) {
          const int64_t sy = y + d.dy, sx = (d.flip ? g.width - 1 - x : x) + d.dx;
          const bool inside = sy >= 0 && sy < g.height && sx >= 0 && sx < g.width;
          image[y * g.width + x] = inside ? source[sy * g.width + sx] : 0.0f;
        }
    }
  }
}

std::function<void(Batch&)> augment(AugmentOptions options, Loc loc) {
  user_check(options.crop_pad >= 0 && options.height >= 0 && options.width >= 0, loc)
      << "augment: crop_pad " << options.crop_pad << ", height " << options.height << " and width "
      << options.width << " must not be negative";
  return [options = std::move(options), loc](Batch& batch) {
    auto it = batch.feeds.find(options.feed);
    user_check(it != batch.feeds.end(), loc)
        << "augment: the batch has no feed \"" << options.feed << "\"; name the image array with .feed";
    augment_images(it->second, options, batch.epoch, batch.index, loc);
  };
}

}  // namespace towerjit::data
