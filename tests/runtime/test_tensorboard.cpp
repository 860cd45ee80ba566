// TensorBoard event files: the CRC-32C against published test vectors, the TFRecord framing
// and the Event messages read back by a decoder written here from the protobuf wire format
// (independent of the protobuf library the writer uses), flushing, ranks and bad paths.
// TensorBoard's own reader checks the same files in tests/examples/tensorboard_reader.sh.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "dsl/error.h"
#include "runtime/report/crc32c.h"
#include "towerjit.h"

namespace fs = std::filesystem;
namespace rp = towerjit::report;

namespace {

struct TempDir {
  explicit TempDir(const std::string& name)
      : path((fs::temp_directory_path() / ("towerjit-tb-" + std::to_string(getpid()) + "-" + name)).string()) {}
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  const std::string path;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint64_t le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

// The records of a TFRecord file, each CRC checked; throws on a bad frame.
std::vector<std::string> records_of(const std::string& file) {
  std::vector<std::string> records;
  for (size_t at = 0; at < file.size();) {
    REQUIRE(at + 12 <= file.size());
    const uint64_t length = le(file, at, 8);
    CHECK(le(file, at + 8, 4) == rp::masked_crc32c(file.data() + at, 8));
    REQUIRE(at + 12 + length + 4 <= file.size());
    const std::string data = file.substr(at + 12, length);
    CHECK(le(file, at + 12 + length, 4) == rp::masked_crc32c(data.data(), data.size()));
    records.push_back(data);
    at += 12 + length + 4;
  }
  return records;
}

// A protobuf message's fields by number: varints and fixed64/fixed32 as their bits,
// length-delimited ones as their bytes (wire format: key = field << 3 | wire type).
struct Fields {
  std::multimap<int, uint64_t> numbers;
  std::multimap<int, std::string> bytes;
};

uint64_t varint(const std::string& s, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const auto b = static_cast<unsigned char>(s.at(at++));
    v |= uint64_t(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
}

Fields decode(const std::string& s) {
  Fields f;
  for (size_t at = 0; at < s.size();) {
    const uint64_t key = varint(s, at);
    const int field = static_cast<int>(key >> 3), wire = static_cast<int>(key & 7);
    if (wire == 0) f.numbers.emplace(field, varint(s, at));
    else if (wire == 1) f.numbers.emplace(field, le(s, at, 8)), at += 8;
    else if (wire == 5) f.numbers.emplace(field, le(s, at, 4)), at += 4;
    else if (wire == 2) {
      const uint64_t n = varint(s, at);
      f.bytes.emplace(field, s.substr(at, n)), at += n;
    } else FAIL("wire type " << wire);
  }
  return f;
}

double as_double(uint64_t bits) { double d; std::memcpy(&d, &bits, 8); return d; }
float as_float(uint64_t bits) { const auto b = static_cast<uint32_t>(bits); float x; std::memcpy(&x, &b, 4); return x; }

struct Scalar {
  int64_t step;
  std::string tag;
  float value;
};

// Event: wall_time 1 (double), step 2, file_version 3, summary 5; Summary: value 1;
// Value: tag 1, simple_value 2 (float), histo 5.
std::vector<Scalar> scalars_of(const std::vector<std::string>& records) {
  std::vector<Scalar> out;
  for (const auto& r : records) {
    const Fields event = decode(r);
    if (!event.bytes.count(5)) continue;
    const Fields summary = decode(event.bytes.find(5)->second);
    for (auto [it, end] = summary.bytes.equal_range(1); it != end; ++it) {
      const Fields value = decode(it->second);
      if (!value.numbers.count(2)) continue;
      out.push_back({static_cast<int64_t>(event.numbers.find(2)->second), value.bytes.find(1)->second,
                     as_float(value.numbers.find(2)->second)});
    }
  }
  return out;
}

std::string only_event_file(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().string());
  REQUIRE(files.size() == 1);
  return files[0];
}

}  // namespace

TEST_CASE("tensorboard: CRC-32C matches the published test vectors", "[report][tensorboard]") {
  // RFC 3720 (iSCSI) B.4 and the "check" value of the CRC catalogue.
  CHECK(rp::crc32c("123456789", 9) == 0xE3069283u);
  std::string zeros(32, '\0'), ones(32, '\xFF'), up(32, '\0'), down(32, '\0');
  for (int i = 0; i < 32; ++i) up[i] = static_cast<char>(i), down[i] = static_cast<char>(31 - i);
  CHECK(rp::crc32c(zeros.data(), 32) == 0x8A9136AAu);
  CHECK(rp::crc32c(ones.data(), 32) == 0x62A8AB43u);
  CHECK(rp::crc32c(up.data(), 32) == 0x46DD794Eu);
  CHECK(rp::crc32c(down.data(), 32) == 0x113FDB5Cu);
  CHECK(rp::crc32c("", 0) == 0u);
  // The mask: rotate right by 15, add 0xa282ead8.
  const uint32_t c = rp::crc32c("123456789", 9);
  CHECK(rp::masked_crc32c("123456789", 9) == ((c >> 15 | c << 17) + 0xa282ead8u));
}

TEST_CASE("tensorboard: event files hold the metrics as framed Event records", "[report][tensorboard]") {
  const TempDir dir("events");
  std::string path;
  {
    rp::TensorBoardWriter tb(dir.path + "/run1");  // a directory made with its parent
    REQUIRE(tb.enabled());
    path = tb.path();
    CHECK(fs::path(path).filename().string().rfind("events.out.tfevents.", 0) == 0);
    for (int64_t step = 1; step <= 7; ++step) tb.log_step({step, 1, 1.0 / step, 1e-3, 1000.0 + step});
    tb.log_eval({7, 1, 0.8488, 0.417});
    tb.scalar("odd/nan", 8, std::nan(""));
  }
  CHECK(only_event_file(dir.path + "/run1") == path);
  const auto records = records_of(read_all(path));
  REQUIRE(records.size() == 1 + 7 * 3 + 2 + 1);
  const Fields first = decode(records[0]);
  CHECK(first.bytes.find(3)->second == "brain.Event:2");
  CHECK(std::abs(as_double(first.numbers.find(1)->second) - static_cast<double>(time(nullptr))) < 60);
  const auto scalars = scalars_of(records);
  REQUIRE(scalars.size() == 24);
  CHECK(scalars[0].tag == "train/loss");
  CHECK(scalars[0].value == 1.0f);
  CHECK(scalars[1].tag == "train/learning_rate");
  CHECK(scalars[1].value == 1e-3f);
  CHECK(scalars[20].tag == "train/samples_per_s");
  CHECK(scalars[20].step == 7);
  CHECK(scalars[20].value == 1007.0f);
  CHECK(scalars[21].tag == "test/accuracy");
  CHECK(scalars[21].value == 0.8488f);
  CHECK(scalars[22].tag == "test/loss");
  CHECK(scalars[22].step == 7);
  CHECK(std::isnan(scalars[23].value));
}

TEST_CASE("tensorboard: records reach the disk every flush interval and at flush()", "[report][tensorboard]") {
  const TempDir dir("flush");
  rp::TensorBoardWriter eager(dir.path + "/eager", 0, /*flush_seconds=*/0);
  eager.scalar("a", 1, 0.5);
  CHECK(scalars_of(records_of(read_all(eager.path()))).size() == 1);  // while the writer lives
  rp::TensorBoardWriter lazy(dir.path + "/lazy", 0, /*flush_seconds=*/3600);
  lazy.scalar("a", 1, 0.5);
  CHECK(records_of(read_all(lazy.path())).size() == 1);  // the file version alone, flushed at creation
  lazy.flush();
  CHECK(scalars_of(records_of(read_all(lazy.path()))).size() == 1);
  // With no write after it, a record still reaches the disk within the interval (the writer's
  // thread flushes it), so a run killed during a long evaluation keeps the steps before it.
  rp::TensorBoardWriter timed(dir.path + "/timed", 0, /*flush_seconds=*/0.05);
  timed.scalar("a", 1, 0.5);
  bool on_disk = false;
  for (int i = 0; i < 200 && !on_disk; ++i) {  // up to 10 s on a loaded machine
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    on_disk = scalars_of(records_of(read_all(timed.path()))).size() == 1;
  }
  CHECK(on_disk);
}

TEST_CASE("tensorboard: a histogram's buckets count every value once", "[report][tensorboard]") {
  const TempDir dir("histo");
  std::vector<float> values;
  for (int i = 0; i < 127; ++i) values.push_back(static_cast<float>(i) / 126.0f - 0.5f);
  values.push_back(NAN);
  std::string path;
  {
    rp::TensorBoardWriter tb(dir.path);
    tb.histogram("weights/w1", 5, values, 7);
    path = tb.path();
  }
  const auto records = records_of(read_all(path));
  REQUIRE(records.size() == 3);  // version, histogram, the count of non-finite values
  const Fields value = decode(decode(decode(records[1]).bytes.find(5)->second).bytes.find(1)->second);
  CHECK(value.bytes.find(1)->second == "weights/w1");
  const Fields h = decode(value.bytes.find(5)->second);  // min 1, max 2, num 3, sum 4, sum_squares 5
  CHECK(as_double(h.numbers.find(1)->second) == -0.5);
  CHECK(as_double(h.numbers.find(2)->second) == 0.5);
  CHECK(as_double(h.numbers.find(3)->second) == 127);
  const std::string limits = h.bytes.find(6)->second, counts = h.bytes.find(7)->second;  // packed doubles
  REQUIRE(limits.size() == 7 * 8);
  REQUIRE(counts.size() == 7 * 8);
  double total = 0;
  for (int b = 0; b < 7; ++b) total += as_double(le(counts, 8 * b, 8));
  CHECK(total == 127);
  CHECK(as_double(le(limits, 6 * 8, 8)) == 0.5);
  const auto nonfinite = scalars_of(records);
  REQUIRE(nonfinite.size() == 1);
  CHECK(nonfinite[0].tag == "weights/w1/nonfinite");
  CHECK(nonfinite[0].value == 1.0f);
}

TEST_CASE("tensorboard: only rank 0 writes", "[report][tensorboard]") {
  const TempDir dir("rank");
  rp::TensorBoardWriter other(dir.path, /*rank=*/1, 2.0);
  CHECK_FALSE(other.enabled());
  other.log_step({1, 1, 0.5, 0.1, 10});
  other.flush();
  CHECK_FALSE(fs::exists(dir.path));
}

TEST_CASE("tensorboard: an unusable directory is named with the reason", "[report][tensorboard]") {
  CHECK_THROWS_WITH(rp::TensorBoardWriter(""), Catch::Contains("path is empty"));
  const TempDir dir("file");
  std::ofstream(dir.path) << "x";  // a file where the directory should be
  CHECK_THROWS_WITH(rp::TensorBoardWriter(dir.path + "/tb"),
                    Catch::Contains("cannot create the TensorBoard directory \"" + dir.path + "/tb\"") &&
                        Catch::Contains("test_tensorboard.cpp"));
}

TEST_CASE("tensorboard: HistogramHook draws each trainable variable every N steps", "[report][tensorboard][hooks]") {
  namespace tj = towerjit;
  const TempDir dir("hook");
  tj::Graph graph;
  std::unique_ptr<tj::TowerTrainer> trainer;
  {
    tj::GraphScope use(graph);
    auto logits = tj::dense(tj::relu(tj::dense(tj::input("x", {tj::kBatch, 3}), 5, "fc1")), 2, "fc2");
    auto loss = tj::mean(tj::softmax_cross_entropy(logits, tj::input("y", {tj::kBatch}, tj::DType::i32)));
    trainer = std::make_unique<tj::TowerTrainer>(graph, loss, tj::Towers{tj::cpu(0)}, tj::adam(0.05),
                                                 tj::TowerTrainerOptions{.logits = logits});
  }
  tj::HostTensor x({7, 3}), y({7}, tj::DType::i32);  // 7 examples, batches of 1: 7 steps an epoch
  for (int i = 0; i < 21; ++i) x.f32[i] = static_cast<float>(i % 5) - 2.0f;
  for (int i = 0; i < 7; ++i) y.i32[i] = i % 2;
  const tj::data::TensorDataset data({{"x", x}, {"y", y}}, "y");
  tj::data::BatchPipeline batches(data, {.batch = 1, .seed = 3});
  std::string path;
  {
    tj::report::TensorBoardWriter tb(dir.path);
    tj::HistogramHook histograms(graph, tb, /*every=*/7);
    tj::fit(*trainer, batches, {.epochs = 2, .hooks = {&histograms}});
    path = tb.path();
  }
  // Steps 7 and 14, each with fc1/kernel, fc1/bias, fc2/kernel, fc2/bias and nothing else (no
  // Adam slots, no global step); at step 14 each histogram describes the final weights.
  std::map<std::pair<int64_t, std::string>, Fields> seen;
  for (const auto& r : records_of(read_all(path))) {
    const Fields event = decode(r);
    if (!event.bytes.count(5)) continue;
    const Fields value = decode(decode(event.bytes.find(5)->second).bytes.find(1)->second);
    REQUIRE(value.bytes.count(5));
    seen[{static_cast<int64_t>(event.numbers.find(2)->second), value.bytes.find(1)->second}] =
        decode(value.bytes.find(5)->second);
  }
  CHECK(seen.size() == 16);
  for (int64_t step : {7, 14})
    for (const char* name : {"fc1/kernel", "fc1/bias", "fc2/kernel", "fc2/bias"}) {
      CHECK(seen.count({step, std::string("weights/") + name}) == 1);
      CHECK(seen.count({step, std::string("gradients/") + name}) == 1);
    }
  // At step 14, the last, each gradient's histogram describes the gradient that step applied.
  const auto gradients = trainer->last_gradients();
  REQUIRE(gradients.size() == 4);
  for (const auto& [name, value] : gradients) {
    const Fields& h = seen.at({14, "gradients/" + name});
    CHECK(as_double(h.numbers.find(1)->second) == *std::min_element(value->f32.begin(), value->f32.end()));
    CHECK(as_double(h.numbers.find(2)->second) == *std::max_element(value->f32.begin(), value->f32.end()));
  }
  for (const auto& [name, value] : trainer->variables()) {
    const auto it = seen.find({14, "weights/" + name});
    if (it == seen.end()) continue;
    const Fields& h = it->second;
    CHECK(as_double(h.numbers.find(1)->second) == *std::min_element(value.f32.begin(), value.f32.end()));
    CHECK(as_double(h.numbers.find(2)->second) == *std::max_element(value.f32.begin(), value.f32.end()));
    CHECK(as_double(h.numbers.find(3)->second) == static_cast<double>(value.size()));
  }
  tj::report::TensorBoardWriter tb(dir.path + "/bad");
  CHECK_THROWS_WITH(tj::HistogramHook(graph, tb, 0), Catch::Contains("histograms every 0 steps") &&
                                                         Catch::Contains("test_tensorboard.cpp"));
}
