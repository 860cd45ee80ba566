// The IDX reader: a good file, and each kind of damage named in the error.
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "runtime/data/fashion_mnist.h"
#include "runtime/data/idx.h"

namespace tj = towerjit;

namespace {

std::string write_gz(const std::string& name, const std::vector<unsigned char>& bytes) {
  const auto path = (std::filesystem::temp_directory_path() / ("towerjit-idx-" + name)).string();
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
  return path;
}

// An IDX header for unsigned bytes of the given dimensions.
std::vector<unsigned char> header(std::vector<uint32_t> dims) {
  std::vector<unsigned char> h = {0, 0, 8, static_cast<unsigned char>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) h.push_back(static_cast<unsigned char>(d >> s));
  return h;
}

}  // namespace

TEST_CASE("IDX images and labels read back scaled and typed", "[data]") {
  auto images = header({2, 2, 3});
  for (int i = 0; i < 12; ++i) images.push_back(static_cast<unsigned char>(i * 20));
  auto labels = header({2});
  labels.push_back(7), labels.push_back(0);
  const auto x = tj::data::read_idx(write_gz("images.gz", images));
  const auto y = tj::data::read_idx(write_gz("labels.gz", labels));
  CHECK(x.shape == tj::Shape{2, 6});
  CHECK(x.f32[11] == Approx(220 / 255.0));
  CHECK(y.dtype == tj::DType::i32);
  CHECK(y.i32 == std::vector<int32_t>{7, 0});
}

TEST_CASE("a damaged IDX file is named with what is wrong", "[data]") {
  auto bad_magic = header({2});
  bad_magic[2] = 0x0D;  // floats: not MNIST's bytes
  bad_magic.push_back(1), bad_magic.push_back(2);
  // What (the file and the fault), where (the line that asked for the data) and the fix.
  const std::string here = "tests/runtime/test_idx.cpp:";
  CHECK_THROWS_WITH(tj::data::read_idx(write_gz("magic.gz", bad_magic)),
                    Catch::Contains("towerjit-idx-magic.gz\" has a bad IDX magic number") &&
                        Catch::Contains("is it an MNIST-format file?") && Catch::Contains(here));
  auto truncated = header({5, 28, 28});
  truncated.resize(truncated.size() + 100);
  CHECK_THROWS_WITH(tj::data::read_idx(write_gz("short.gz", truncated)),
                    Catch::Contains("holds 100 data bytes but its header says 3920") &&
                        Catch::Contains("the file is truncated or damaged") && Catch::Contains(here));
  auto inside_header = header({5, 28, 28});
  inside_header.resize(10);
  CHECK_THROWS_WITH(tj::data::read_idx(write_gz("header.gz", inside_header)),
                    Catch::Contains("ends inside its header (10 bytes); it is truncated") && Catch::Contains(here));
  // A gzip stream damaged after its header: zlib's reason, the file, the fix, the caller's line.
  std::vector<unsigned char> gz;
  {
    const std::string good = write_gz("good.gz", truncated);
    FILE* f = std::fopen(good.c_str(), "rb");
    for (int c; (c = std::fgetc(f)) != EOF;) gz.push_back(static_cast<unsigned char>(c));
    std::fclose(f);
  }
  for (size_t i = 10; i < gz.size() - 8; ++i) gz[i] ^= 0x5A;  // the deflate stream, not the header
  const auto damaged = (std::filesystem::temp_directory_path() / "towerjit-idx-damaged.gz").string();
  {
    FILE* f = std::fopen(damaged.c_str(), "wb");
    std::fwrite(gz.data(), 1, gz.size(), f);
    std::fclose(f);
  }
  CHECK_THROWS_WITH(tj::data::read_idx(damaged), Catch::Contains("towerjit-idx-damaged.gz\" is not a readable gzip or IDX file (") &&
                                                     Catch::Contains("the file is damaged: fetch it again") && Catch::Contains(here));
  CHECK_THROWS_WITH(tj::data::read_idx("/nonexistent/x.gz", "install dataset-fashion-mnist"),
                    Catch::Contains("does not exist") && Catch::Contains("dataset-fashion-mnist"));
  CHECK_THROWS_WITH(tj::data::load_mnist_format("train", "/nonexistent"), Catch::Contains("--data") && Catch::Contains(here));
  CHECK_THROWS_WITH(tj::data::load_mnist_format("validation"),
                    Catch::Contains("unknown split \"validation\"; use \"train\" or \"test\"") && Catch::Contains(here));
}

TEST_CASE("a data directory whose images and labels differ in count names both counts", "[data][errors]") {
  const auto dir = std::filesystem::temp_directory_path() / "towerjit-idx-mismatch";
  std::filesystem::create_directories(dir);
  auto images = header({3, 2, 2});
  images.resize(images.size() + 12);
  auto labels = header({2});
  labels.resize(labels.size() + 2);
  write_gz("mismatch/train-images-idx3-ubyte.gz", images);
  write_gz("mismatch/train-labels-idx1-ubyte.gz", labels);
  CHECK_THROWS_WITH(tj::data::load_mnist_format("train", dir.string()),
                    Catch::Contains("has 3 train images but 2 labels; the files do not belong together") &&
                        Catch::Contains("take both from one copy of the dataset") &&
                        Catch::Contains("tests/runtime/test_idx.cpp:"));
  std::filesystem::remove_all(dir);
}

// Found by the IDX fuzz target (fuzz/regressions/idx_reader/dims-overflow): dimensions whose
// product passes 2^63 overflowed the element count instead of failing the size check.
TEST_CASE("an IDX header of huge dimensions is damage, not an overflow", "[data]") {
  CHECK_THROWS_WITH(tj::data::read_idx(write_gz("huge.gz", header({0xffffffff, 0xffffffff, 0xffffffff}))),
                    Catch::Contains("header says more than any file holds"));
  CHECK_THROWS_WITH(tj::data::read_idx(write_gz("wide.gz", header({0, 0xffffffff, 0xffffffff}))),
                    Catch::Contains("images of 4294967295 x 4294967295 pixels"));
  const auto none = tj::data::read_idx(write_gz("none.gz", header({0, 28, 28})));
  CHECK(none.shape == tj::Shape{0, 784});
}

// A file that inflates past its header's count (a gzip bomb, or data appended) fails once the
// reader has inflated one byte more than the header says, before the rest: here 64 MiB of
// zeros with a damaged checksum at the very end, which a reader inflating the whole file
// would report instead ("incorrect data check").
TEST_CASE("an IDX file inflating past its header's count stops at the count, before the rest", "[data]") {
  auto bomb = header({10});
  bomb.resize(bomb.size() + (64u << 20));
  std::vector<unsigned char> gz;
  {
    const std::string path = write_gz("bomb-good.gz", bomb);
    FILE* f = std::fopen(path.c_str(), "rb");
    for (int c; (c = std::fgetc(f)) != EOF;) gz.push_back(static_cast<unsigned char>(c));
    std::fclose(f);
  }
  REQUIRE(gz.size() < (1u << 20));  // what a bomb is: small compressed, huge inflated
  gz[gz.size() - 8] ^= 0xFF;        // the CRC-32 of the trailer
  const auto path = (std::filesystem::temp_directory_path() / "towerjit-idx-bomb.gz").string();
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(gz.data(), 1, gz.size(), f);
    std::fclose(f);
  }
  CHECK_THROWS_WITH(tj::data::read_idx(path), Catch::Contains("holds more than 10 data bytes but its header says 10") &&
                                                  Catch::Contains("the file is truncated or damaged") &&
                                                  Catch::Contains("tests/runtime/test_idx.cpp:"));
  // The same file with its trailer intact, and an exact one, read as before.
  CHECK_THROWS_WITH(tj::data::read_idx(write_gz("bomb.gz", bomb)), Catch::Contains("holds more than 10 data bytes"));
  bomb.resize(header({10}).size() + 10);
  CHECK(tj::data::read_idx(write_gz("exact.gz", bomb)).shape == tj::Shape{10});
}

TEST_CASE("Debian's Fashion-MNIST loads with 60000 and 10000 examples", "[data]") {
  if (!std::filesystem::exists(tj::data::kFashionMnistDir)) {
    WARN("dataset-fashion-mnist is not installed: skipped");
    return;
  }
  const auto test = tj::data::load_mnist_format("test");
  CHECK(test.size() == 10000);
  CHECK(test.images.shape == tj::Shape{10000, 784});
  CHECK(*std::max_element(test.labels.i32.begin(), test.labels.i32.end()) == 9);
}
