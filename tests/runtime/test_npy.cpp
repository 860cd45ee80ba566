// The .npy and .npz readers: every element type in both byte orders, C and Fortran order, odd
// sizes, stored and deflated archives, TensorDataset::from_npz, and each kind of damaged or
// hostile file named in its error (never a crash, never an allocation the file cannot back).
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>

#include "runtime/data/npy.h"
#include "runtime/data/npz.h"
#include "runtime/data/tensor_dataset.h"
#include "tests/runtime/interop_bytes.h"

namespace tj = towerjit;
namespace tt = towerjit::testing;
using Catch::Contains;

namespace {

std::string header(const std::string& descr, const std::string& shape, bool fortran = false) {
  return "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") + ", 'shape': " + shape + ", }";
}

// Values 0, 1, 2, ... (negated at odd positions for signed types) as `T`, in the given order.
template <typename T>
std::string counting(int64_t n, bool big) {
  std::string out;
  for (int64_t i = 0; i < n; ++i) {
    const double v = (std::is_signed_v<T> && i % 2) ? -static_cast<double>(i) : static_cast<double>(i % 256);
    out += tt::element_bytes(static_cast<T>(v), big);
  }
  return out;
}

double at(const tj::HostTensor& t, int64_t i) { return t.dtype == tj::DType::f32 ? t.f32[i] : t.i32[i]; }

std::string write(const std::string& name, const std::string& bytes) {
  const auto path = (std::filesystem::temp_directory_path() / ("towerjit-npy-" + name)).string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

tj::data::NpyArray parse(const std::string& bytes) {
  return tj::data::parse_npy(bytes, "a.npy", std::source_location::current());
}

}  // namespace

TEST_CASE("npy: every element type in both byte orders reads as its values, at odd sizes", "[data][npy]") {
  for (const int64_t n : {1, 7, 127}) {
    for (const bool big : {false, true}) {
      const std::string o = big ? ">" : "<";
      const std::string shape = "(" + std::to_string(n) + ",)";
      struct Case {
        std::string descr, data;
        tj::DType dtype;
        bool is_signed;
      };
      const std::vector<Case> cases = {
          {o + "f4", counting<float>(n, big), tj::DType::f32, true},
          {o + "f8", counting<double>(n, big), tj::DType::f32, true},
          {o + "i4", counting<int32_t>(n, big), tj::DType::i32, true},
          {o + "i8", counting<int64_t>(n, big), tj::DType::i32, true},
          {"|u1", counting<uint8_t>(n, big), tj::DType::i32, false},
      };
      for (const Case& c : cases) {
        INFO(c.descr << " n=" << n);
        const auto a = parse(tt::npy_bytes(header(c.descr, shape), c.data));
        REQUIRE(a.values.shape == tj::Shape{n});
        CHECK(a.values.dtype == c.dtype);
        for (int64_t i = 0; i < n; ++i)
          CHECK(at(a.values, i) == ((c.is_signed && i % 2) ? -static_cast<double>(i) : static_cast<double>(i % 256)));
      }
    }
    std::string bools;
    for (int64_t i = 0; i < n; ++i) bools += static_cast<char>(i % 3 == 0);
    const auto b = parse(tt::npy_bytes(header("|b1", "(" + std::to_string(n) + ",)"), bools));
    CHECK(b.stored == tj::data::NpyType::boolean);
    for (int64_t i = 0; i < n; ++i) CHECK(b.values.i32[i] == (i % 3 == 0));
  }
  // A scalar, an empty array, versions 2 and 3 of the format.
  CHECK(parse(tt::npy_bytes(header("<f4", "()"), tt::element_bytes(2.5f, false))).values.f32[0] == 2.5f);
  CHECK(parse(tt::npy_bytes(header("<f4", "(0, 5)"), "")).values.shape == tj::Shape{0, 5});
  CHECK(parse(tt::npy_bytes(header("<i4", "(1,)"), tt::element_bytes(int32_t{-3}, false), 2)).values.i32[0] == -3);
  CHECK(parse(tt::npy_bytes(header("<i4", "(1,)"), tt::element_bytes(int32_t{9}, false), 3)).values.i32[0] == 9);
}

TEST_CASE("npy: Fortran order comes back in C order", "[data][npy]") {
  // numpy.asfortranarray(numpy.arange(6).reshape(2, 3)) stores 0 3 1 4 2 5.
  std::string data;
  for (int v : {0, 3, 1, 4, 2, 5}) data += tt::element_bytes(static_cast<float>(v), false);
  const auto a = parse(tt::npy_bytes(header("<f4", "(2, 3)", true), data));
  REQUIRE(a.values.shape == tj::Shape{2, 3});
  for (int i = 0; i < 6; ++i) CHECK(a.values.f32[i] == i);
  // [7, 3, 5] in Fortran order: element (i, j, k) stored at i + 7 j + 21 k.
  std::string f;
  for (int k = 0; k < 5; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 7; ++i) f += tt::element_bytes(int32_t{100 * i + 10 * j + k}, true);
  const auto b = parse(tt::npy_bytes(header(">i4", "(7, 3, 5)", true), f));
  for (int i = 0, c = 0; i < 7; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 5; ++k, ++c) CHECK(b.values.i32[c] == 100 * i + 10 * j + k);
}

TEST_CASE("npy: save_npy writes what the reader and numpy read", "[data][npy]") {
  tj::HostTensor t(tj::Shape{7, 3});
  for (int i = 0; i < 21; ++i) t.f32[i] = 0.5f * i - 3;
  const auto back = parse(tj::data::encode_npy(t));
  CHECK(back.values.shape == t.shape);
  CHECK(back.values.f32 == t.f32);
  const std::string path = write("saved.npy", "");
  tj::HostTensor labels(tj::Shape{1}, tj::DType::i32);
  labels.i32[0] = -7;
  tj::data::save_npy(path, labels);
  CHECK(tj::data::load_npy(path).i32 == labels.i32);
  CHECK((tj::data::encode_npy(t).size() - 21 * 4) % 64 == 0);  // the data starts 64-byte aligned
}

TEST_CASE("npy: damaged and hostile files are named errors", "[data][npy][errors]") {
  const std::string ok = tt::npy_bytes(header("<f4", "(2,)"), std::string(8, '\0'));
  CHECK_THROWS_WITH(parse("GIF89a" + ok), Contains("\"a.npy\" is not an .npy file (it does not start with \\x93NUMPY)"));
  CHECK_THROWS_WITH(parse(ok.substr(0, 9)), Contains("ends inside its .npy header"));
  CHECK_THROWS_WITH(parse(ok.substr(0, 40)), Contains("holds only 40 bytes in all; the file is truncated"));
  CHECK_THROWS_WITH(parse(ok.substr(0, ok.size() - 1)),
                    Contains("\"a.npy\" holds 7 data bytes but its header says [2] float32, 8 bytes; the file is truncated"));
  std::string v9 = ok;
  v9[6] = 9;
  CHECK_THROWS_WITH(parse(v9), Contains("is .npy format version 9.0, which towerjit does not read"));
  CHECK_THROWS_WITH(parse(tt::npy_bytes("{'descr': '<f4', 'shape': (2,), }", std::string(8, '\0'))),
                    Contains("has a damaged .npy header (no 'descr', 'fortran_order' or 'shape'"));
  CHECK_THROWS_WITH(parse(tt::npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'descr': '<f4'}", "")),
                    Contains("an unexpected or repeated key 'descr'"));
  CHECK_THROWS_WITH(parse(tt::npy_bytes(header("<f4", "(-2,)"), "")),
                    Contains("a dimension that is not a non-negative integer"));
  CHECK_THROWS_WITH(parse(tt::npy_bytes("__import__('os').system('true')", "")), Contains("a missing '{'"));
  CHECK_THROWS_WITH(parse(tt::npy_bytes(header("<c8", "(2,)"), std::string(16, '\0'))),
                    Contains("holds elements of type '<c8', which towerjit does not read") &&
                        Contains("a.astype(numpy.float32)"));
  // A shape whose element count overflows 64 bits, and one that claims gigabytes of a 100-byte
  // file: refused by the size check before anything is allocated.
  CHECK_THROWS_WITH(parse(tt::npy_bytes(header("<f4", "(4294967296, 4294967296, 16)"), "")),
                    Contains("whose element count does not fit a tensor; the header is damaged"));
  CHECK_THROWS_WITH(parse(tt::npy_bytes(header("<f4", "(100000, 100000)"), std::string(4, '\0'))),
                    Contains("holds 4 data bytes but its header says [100000,100000] float32, 40000000000 bytes"));
  CHECK_THROWS_WITH(parse(tt::npy_bytes(header("<f4", "(99999999999999999999999,)"), "")), Contains("a dimension past 2^64"));
  CHECK_THROWS_WITH(parse(tt::npy_bytes(header("<i8", "(2,)"), tt::element_bytes(int64_t{1}, false) +
                                                                   tt::element_bytes(int64_t{1} << 40, false))),
                    Contains("holds int64 value 1099511627776 at element 1, outside int32's range"));
  CHECK_THROWS_WITH(tj::data::load_npy("/nonexistent/a.npy"), Contains("\"/nonexistent/a.npy\" does not exist"));
}

TEST_CASE("npz: stored and deflated archives read every array", "[data][npy]") {
  std::string x, y;
  for (int i = 0; i < 7 * 3; ++i) x += tt::element_bytes(static_cast<uint8_t>(i * 12), false);
  for (int i = 0; i < 7; ++i) y += tt::element_bytes(static_cast<int64_t>(i % 3), false);
  const std::vector<std::pair<std::string, std::string>> members = {
      {"x_train.npy", tt::npy_bytes(header("|u1", "(7, 3)"), x)}, {"y_train.npy", tt::npy_bytes(header("<i8", "(7,)"), y)}};
  for (const bool deflated : {false, true}) {
    INFO((deflated ? "deflated" : "stored"));
    const auto arrays = tj::data::parse_npz(tt::zip_bytes(members, deflated), "a.npz", std::source_location::current());
    REQUIRE(arrays.size() == 2);
    CHECK(arrays.at("x_train").values.shape == tj::Shape{7, 3});
    CHECK(arrays.at("x_train").values.i32[20] == 240);
    CHECK(arrays.at("y_train").values.i32[5] == 2);
    const std::string path = write(deflated ? "d.npz" : "s.npz", tt::zip_bytes(members, deflated));
    const auto data = tj::data::TensorDataset::from_npz(path, {.features = "x_train", .labels = "y_train", .flatten = true});
    CHECK(data.size() == 7);
    CHECK(data.array("image").shape == tj::Shape{7, 3});
    CHECK(data.array("image").f32[20] == Approx(240.0 / 255));  // uint8 pixels scaled to [0, 1]
    CHECK(data.labels().i32 == std::vector<int32_t>{0, 1, 2, 0, 1, 2, 0});
    const auto unscaled = tj::data::TensorDataset::from_npz(path, {.features = "x_train", .scale = 1.0});
    CHECK(unscaled.array("image").f32[20] == 240);
    CHECK_FALSE(unscaled.has_labels());
    CHECK_THROWS_WITH(tj::data::TensorDataset::from_npz(path, {.features = "x_test"}),
                      Contains("has no array \"x_test\" for the features (its arrays: \"x_train\", \"y_train\")"));
  }
  std::string floats;
  for (int i = 0; i < 7; ++i) floats += tt::element_bytes(0.5f, false);
  const std::string path = write("float-labels.npz", tt::zip_bytes({{"x.npy", tt::npy_bytes(header("<f4", "(7,)"), floats)},
                                                                    {"y.npy", tt::npy_bytes(header("<f4", "(7,)"), floats)}},
                                                                   false));
  CHECK_THROWS_WITH(tj::data::TensorDataset::from_npz(path, {.features = "x", .labels = "y"}),
                    Contains("holds float32 labels; labels are class numbers: save them with astype(numpy.int32)"));
  // Integer features float32 cannot hold exactly.
  const std::string big = write("big-features.npz", tt::zip_bytes({{"x.npy", tt::npy_bytes(header("<i4", "(2,)"),
      tt::element_bytes(int32_t{16777216}, false) + tt::element_bytes(int32_t{16777217}, false))}}, false));
  CHECK_THROWS_WITH(tj::data::TensorDataset::from_npz(big, {.features = "x"}),
                    Contains("holds the integer 16777217 at element 1, which float32 features cannot hold exactly "
                             "(beyond 2^24); scale it in numpy first"));
}

TEST_CASE("npy: a tensor whose values do not fill its shape is not written", "[data][npy][errors]") {
  tj::HostTensor t(tj::Shape{2, 3});
  t.f32.pop_back();
  CHECK_THROWS_WITH(tj::data::encode_npy(t), Contains("the tensor [2,3] holds 5 values, not 6; fill it"));
}

TEST_CASE("npz: damaged and hostile archives are named errors", "[data][npy][errors]") {
  const std::string npy = tt::npy_bytes(header("<f4", "(2,)"), std::string(8, '\0'));
  const std::string stored = tt::zip_bytes({{"a.npy", npy}}, false);
  auto parse_npz = [](const std::string& bytes) {
    return tj::data::parse_npz(bytes, "a.npz", std::source_location::current());
  };
  CHECK_THROWS_WITH(parse_npz(npy), Contains("\"a.npz\" is not an .npz file (no zip end record)"));
  CHECK_THROWS_WITH(parse_npz(stored.substr(0, stored.size() - 30)), Contains("is not an .npz file"));
  // The directory cut off: the end record points past it.
  std::string cut = stored;
  cut.replace(cut.size() - 22 + 16, 4, tt::le(0x7fffffff, 4));
  CHECK_THROWS_WITH(parse_npz(cut), Contains("is a damaged or truncated .npz archive: its central directory at byte "
                                             "2147483647 runs past the end of the file"));
  std::string flipped = stored;
  flipped[30 + 5 + 128 + 2] ^= 1;  // a data byte of the member (after the local header, the name, the .npy header)
  CHECK_THROWS_WITH(parse_npz(flipped), Contains("member \"a.npy\" of \"a.npz\" fails its CRC-32 check"));
  CHECK_THROWS_WITH(parse_npz(tt::zip_bytes({{"notes.txt", "hello"}}, false)),
                    Contains("member \"notes.txt\" of \"a.npz\" is not an .npy array"));
  CHECK_THROWS_WITH(parse_npz(tt::zip_bytes({{"a.npy", npy}, {"a.npy", npy}}, false)),
                    Contains("holds two arrays named \"a\""));
  // A deflated member claiming 4 GB from a few bytes: refused before inflating.
  std::string bomb = tt::zip_bytes({{"a.npy", npy}}, true);
  const size_t directory = bomb.size() - 22 - (46 + 5);
  bomb.replace(directory + 24, 4, tt::le(0xfffffff0u, 4));
  CHECK_THROWS_WITH(parse_npz(bomb), Contains("claims 4294967280 bytes from") &&
                                         Contains("more than deflate can expand to; the archive is damaged"));
  // A directory claiming 1000 members in 51 bytes.
  std::string many = stored;
  many.replace(many.size() - 22 + 8, 4, tt::le(1000, 2) + tt::le(1000, 2));
  CHECK_THROWS_WITH(parse_npz(many), Contains("its directory claims 1000 members in 51 bytes"));
  // Two directory entries sharing one member's bytes (a zip bomb's trick).
  std::string twice = tt::zip_bytes({{"a.npy", npy}, {"b.npy", npy}}, false);
  const size_t second = twice.size() - 22 - (46 + 5);
  twice.replace(second + 42, 4, tt::le(0, 4));
  CHECK_THROWS_WITH(parse_npz(twice), Contains("two members overlap at byte 0"));
  // A deflated member whose stream is damaged.
  std::string broken = tt::zip_bytes({{"a.npy", npy}}, true);
  broken[30 + 5] = '\xff';
  CHECK_THROWS_WITH(parse_npz(broken), Contains("does not inflate to the 136 bytes it claims"));
  // A member whose directory entry has lost its signature, an encrypted member, a stored member
  // whose two sizes differ, a local header that is not there, one part of a multi-part archive,
  // and a zip64 end record announced but missing.
  const size_t entry = stored.size() - 22 - (46 + 5);
  std::string unsigned_entry = stored;
  unsigned_entry[entry] = 'X';
  CHECK_THROWS_WITH(parse_npz(unsigned_entry), Contains("directory entry 0 at byte 171 has no signature"));
  std::string encrypted = stored;
  encrypted.replace(entry + 8, 2, tt::le(1, 2));
  CHECK_THROWS_WITH(parse_npz(encrypted), Contains("member \"a.npy\" of \"a.npz\" is encrypted; towerjit reads only "
                                                   "unencrypted archives"));
  std::string sizes = stored;
  sizes.replace(entry + 24, 4, tt::le(100, 4));
  CHECK_THROWS_WITH(parse_npz(sizes), Contains("is stored but its sizes differ (136 and 100 bytes)"));
  std::string no_local = stored;
  no_local[0] = 'X';
  CHECK_THROWS_WITH(parse_npz(no_local), Contains("member \"a.npy\" of \"a.npz\" has no local header at byte 0"));
  std::string part = stored;
  part.replace(part.size() - 22 + 4, 2, tt::le(1, 2));
  CHECK_THROWS_WITH(parse_npz(part), Contains("is one part of a multi-part zip archive, which towerjit does not read"));
  std::string zip64 = stored;
  zip64.replace(zip64.size() - 22 + 16, 4, tt::le(0xffffffff, 4));
  CHECK_THROWS_WITH(parse_npz(zip64), Contains("a zip64 end record is announced but missing"));
  std::string method = stored;
  method.replace(stored.size() - 22 - (46 + 5) + 10, 2, tt::le(12, 2));  // bzip2
  CHECK_THROWS_WITH(parse_npz(method), Contains("is compressed with zip method 12, which towerjit does not read"));
}
