// Declaring towers: devices, batch splits, reduction weights and variable placement (the
// declarative half of issue 5; nothing here runs a tower).
#include <catch2/catch.hpp>

#include <numeric>

#include "towerjit.h"

using namespace towerjit;
using Catch::Contains;
using V = std::vector<int64_t>;

namespace {
// Where a call on line `line` of this file is reported; pass __LINE__ on the call's own line.
std::string here(int line) { return "tests/dsl/test_towers.cpp:" + std::to_string(line); }
double total(const std::vector<double>& w) { return std::accumulate(w.begin(), w.end(), 0.0); }
}  // namespace

TEST_CASE("devices: constructors, str and parsing", "[towers]") {
  CHECK(cpu(0).str() == "cpu:0");
  CHECK(gpu(3).str() == "gpu:3");
  CHECK(parse_device("cpu:0") == cpu(0));
  CHECK(parse_device(" gpu:12 ") == gpu(12));
  CHECK(parse_devices("cpu:0,cpu:1") == std::vector<Device>{cpu(0), cpu(1)});
  CHECK(parse_devices("gpu:0, gpu:0 ,cpu:2") == std::vector<Device>{gpu(0), gpu(0), cpu(2)});
  CHECK(str(parse_devices("gpu:1,cpu:0")) == "gpu:1,cpu:0");
  CHECK(cpu(1) != gpu(1));
}

TEST_CASE("devices: bad strings name the string, the valid forms and the line", "[towers]") {
  REQUIRE_THROWS_WITH(parse_device("tpu:0"), Contains("unknown device \"tpu:0\"; use cpu:N or gpu:N") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(parse_device("cuda:1"), Contains("unknown device \"cuda:1\"") && Contains("did you mean gpu:1?") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(parse_device("/gpu:0"), Contains("did you mean gpu:0?") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(parse_device("gpu"), Contains("device \"gpu\" has no index") && Contains("did you mean gpu:0?") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(parse_device("cpu:-1"), Contains("device \"cpu:-1\" has a bad index \"-1\"") && Contains("cpu:N or gpu:N") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(parse_device(""), Contains("empty device string") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(parse_devices("cpu:0,tpu:1"), Contains("unknown device \"tpu:1\"") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(parse_devices("cpu:0,,cpu:1"), Contains("entry 1 is empty") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(parse_devices(" "), Contains("empty device list") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(gpu(-2), Contains("gpu(-2): a device index must be >= 0") && Contains(here(__LINE__)));
}

TEST_CASE("split_batch: the seed's remainder-last split", "[towers]") {
  CHECK(split_batch(15, 2, Split::remainder_last) == V{7, 8});  // the seed's own example
  CHECK(split_batch(64, 3, Split::remainder_last) == V{21, 21, 22});
  CHECK(split_batch(1, 1, Split::remainder_last) == V{1});
  CHECK(split_batch(7, 7, Split::remainder_last) == V{1, 1, 1, 1, 1, 1, 1});
  CHECK(split_batch(127, 4, Split::remainder_last) == V{31, 31, 31, 34});
  CHECK(split_batch(10, 4, Split::remainder_last) == V{2, 2, 2, 4});
}

TEST_CASE("split_batch: balanced sizes differ by at most one, larger first", "[towers]") {
  CHECK(split_batch(15, 2, Split::balanced) == V{8, 7});
  CHECK(split_batch(64, 3, Split::balanced) == V{22, 21, 21});
  CHECK(split_batch(1, 1, Split::balanced) == V{1});
  CHECK(split_batch(7, 7, Split::balanced) == V{1, 1, 1, 1, 1, 1, 1});
  CHECK(split_batch(127, 4, Split::balanced) == V{32, 32, 32, 31});
  for (int64_t b = 1; b <= 40; ++b)
    for (int n = 1; n <= b && n <= 9; ++n)
      for (Split p : {Split::remainder_last, Split::balanced}) {
        V s = split_batch(b, n, p);
        REQUIRE(s.size() == static_cast<size_t>(n));
        CHECK(std::accumulate(s.begin(), s.end(), int64_t{0}) == b);
        CHECK(*std::min_element(s.begin(), s.end()) >= 1);
        if (p == Split::balanced) CHECK(s.front() - s.back() <= 1);
      }
}

TEST_CASE("split_batch: bad input", "[towers]") {
  REQUIRE_THROWS_WITH(split_batch(2, 3, Split::remainder_last), Contains("more towers than examples in a batch: 3 towers for a batch of 2 examples") && Contains("at least 3 examples or at most 2 towers") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(split_batch(8, 0, Split::balanced), Contains("0 towers for a batch of 8") && Contains("at least one tower") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(split_batch(0, 2, Split::balanced), Contains("a batch of 0 examples") && Contains(here(__LINE__)));
  auto towers = Towers{cpu(0), cpu(1), cpu(2), cpu(3)};
  REQUIRE_THROWS_WITH(towers.slices(3), Contains("4 towers for a batch of 3") && Contains(here(__LINE__)));
}

TEST_CASE("reduction_weights: what each reduction multiplies tower gradients by", "[towers]") {
  const V uneven{7, 8};
  const auto avg = reduction_weights(uneven, SyncAverage{});
  CHECK(avg[0] == Approx(7.0 / 15));
  CHECK(avg[1] == Approx(8.0 / 15));
  CHECK(total(avg) == Approx(1.0));
  const auto mean = reduction_weights(uneven, SyncPerTowerMean{});
  CHECK(mean == std::vector<double>{0.5, 0.5});
  CHECK(total(mean) == Approx(1.0));
  CHECK(avg[0] != Approx(mean[0]));  // the seed's mean weighs an example of tower 0 more
  CHECK(reduction_weights(uneven, SyncSum{}) == std::vector<double>{1.0, 1.0});
  CHECK(reduction_weights(uneven, AsyncApply{}) == std::vector<double>{0.5, 0.5});
  CHECK(reduction_weights(uneven, AsyncApply{.scale_gradient = false}) == std::vector<double>{1.0, 1.0});
  CHECK(reduction_weights({15}, AsyncApply{}) == std::vector<double>{1.0});  // N = 1: no scale
  // Even splits: weighted average and the seed's mean agree.
  CHECK(reduction_weights({16, 16, 16, 16}, SyncAverage{}) == reduction_weights({16, 16, 16, 16}, SyncPerTowerMean{}));
  CHECK(total(reduction_weights(split_batch(127, 4, Split::remainder_last), SyncAverage{})) == Approx(1.0));
}

TEST_CASE("reduction_weights: reproduce the seed's formula and the full-batch gradient", "[towers]") {
  // Per-example gradients of a scalar parameter; tower i's gradient is the mean of its slice.
  std::vector<double> g(15);
  for (size_t k = 0; k < g.size(); ++k) g[k] = 0.25 * static_cast<double>(k * k) - 1.0;
  const V slices = split_batch(15, 2, Split::remainder_last);
  std::vector<double> tower_mean;
  size_t at = 0;
  for (int64_t n : slices) {
    tower_mean.push_back(std::accumulate(g.begin() + at, g.begin() + at + n, 0.0) / n);
    at += static_cast<size_t>(n);
  }
  auto combine = [&](const Reduction& r) {
    auto w = reduction_weights(slices, r);
    return w[0] * tower_mean[0] + w[1] * tower_mean[1];
  };
  const double full_batch = std::accumulate(g.begin(), g.end(), 0.0) / 15;
  CHECK(combine(SyncAverage{}) == Approx(full_batch).epsilon(1e-12));
  CHECK(combine(SyncPerTowerMean{}) == Approx((tower_mean[0] + tower_mean[1]) / 2).epsilon(1e-12));
  CHECK(combine(SyncPerTowerMean{}) != Approx(full_batch));
  CHECK(combine(SyncSum{}) == Approx(tower_mean[0] + tower_mean[1]));
}

TEST_CASE("reduction_weights: bad input", "[towers]") {
  REQUIRE_THROWS_WITH(reduction_weights({}, SyncAverage{}), Contains("no tower slices") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(reduction_weights({4, 0}, SyncSum{}), Contains("tower 1 has a slice of 0 examples (slices 4, 0)") && Contains(here(__LINE__)));
}

// Variables of mixed sizes (bytes), in creation order: a hand-worked greedy below each case.
const V kBytes{400, 100, 300, 200, 50, 50};

TEST_CASE("place_variables: the seed's rule for 1, 2, 3, 4 and 8 towers", "[towers]") {
  using D = std::vector<Device>;
  const Device g0 = gpu(0), g1 = gpu(1), g2 = gpu(2), c0 = cpu(0);
  CHECK(place_variables(kBytes, {g0}) == D(6, g0));
  // loads [0,0] -> 400:g0 [400,0] -> 100:g1 [400,100] -> 300:g1 [400,400] -> 200:g0 (tie)
  // [600,400] -> 50:g1 [600,450] -> 50:g1 [600,500]
  CHECK(place_variables(kBytes, {g0, g1}) == D{g0, g1, g1, g0, g1, g1});
  // [0,0,0] -> 400:g0 -> 100:g1 -> 300:g2 [400,100,300] -> 200:g1 [400,300,300]
  // -> 50:g1 (tie with g2) [400,350,300] -> 50:g2 [400,350,350]
  CHECK(place_variables(kBytes, {g0, g1, g2}) == D{g0, g1, g2, g1, g1, g2});
  // 4 or more towers: every variable on the CPU.
  CHECK(place_variables(kBytes, {g0, g1, g2, gpu(3)}) == D(6, c0));
  D eight;
  for (int i = 0; i < 8; ++i) eight.push_back(gpu(i));
  CHECK(place_variables(kBytes, eight) == D(6, c0));
  // CPU towers follow the same rule.
  CHECK(place_variables(kBytes, {cpu(0), cpu(1)}) == D{cpu(0), cpu(1), cpu(1), cpu(0), cpu(1), cpu(1)});
  CHECK(place_variables({}, {g0, g1}).empty());
}

TEST_CASE("place_variables: several towers on one device", "[towers]") {
  using D = std::vector<Device>;
  const Device g0 = gpu(0), g1 = gpu(1);
  // gpu:0 is one candidate with one load, so this places as {g0, g1} does.
  CHECK(place_variables(kBytes, {g0, g0, g1}) == place_variables(kBytes, {g0, g1}));
  CHECK(place_variables(kBytes, {g1, g0, g1}) == D{g1, g0, g0, g1, g0, g0});  // ties: first listed
  // Four towers count as four even on two devices: the CPU, as in the seed.
  CHECK(place_variables(kBytes, {g0, g0, g1, g1}) == D(6, cpu(0)));
}

TEST_CASE("place_variables: overrides win and add to no load", "[towers]") {
  using D = std::vector<Device>;
  const Device g0 = gpu(0), g1 = gpu(1), c0 = cpu(0);
  // Variable 0 pinned to the CPU; the rest: 100:g0 [100,0] -> 300:g1 [100,300] -> 200:g0
  // [300,300] -> 50:g0 (tie) [350,300] -> 50:g1 [350,350]
  CHECK(place_variables(kBytes, {g0, g1}, {{0, c0}}) == D{c0, g0, g1, g0, g0, g1});
  CHECK(place_variables(kBytes, {g0, g1, gpu(2), gpu(3)}, {{2, g1}, {5, gpu(7)}}) == D{c0, c0, g1, c0, c0, gpu(7)});
  auto towers = Towers{g0, g1}.reduce(AsyncApply{});
  CHECK(towers.placement(kBytes, {{0, c0}}) == D{c0, g0, g1, g0, g0, g1});
}

TEST_CASE("place_variables: bad input", "[towers]") {
  REQUIRE_THROWS_WITH(place_variables(kBytes, {}), Contains("no towers for 6 variables") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(place_variables(kBytes, {gpu(0)}, {{6, cpu(0)}}), Contains("an override for variable 6 (to cpu:0), but there are 6 variables; use an index from 0 to 5") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(place_variables({10, -4}, {gpu(0)}), Contains("variable 1 has -4 bytes") && Contains(here(__LINE__)));
}

TEST_CASE("Towers: declaring a strategy", "[towers]") {
  auto towers = Towers{cpu(0), cpu(1)};
  CHECK(towers.size() == 2);
  CHECK(towers.split_policy() == Split::remainder_last);
  CHECK(std::holds_alternative<SyncAverage>(towers.reduction()));
  CHECK(towers.sync_variant() == SyncVariant::replicated);
  CHECK(towers.str() == "Towers{cpu:0,cpu:1} split=remainder_last reduce=sync_average variant=replicated");
  CHECK(towers.slices(15) == V{7, 8});
  auto same_device = Towers{cpu(0), cpu(0), cpu(0)}.split(Split::balanced).reduce(SyncPerTowerMean{}).variant(SyncVariant::parameter_server);
  CHECK(same_device.slices(64) == V{22, 21, 21});
  CHECK(same_device.weights(64) == std::vector<double>(3, 1.0 / 3));
  CHECK(same_device.str() == "Towers{cpu:0,cpu:0,cpu:0} split=balanced reduce=sync_per_tower_mean variant=parameter_server");
  auto async = Towers(parse_devices("gpu:0,gpu:1")).reduce(AsyncApply{.scale_gradient = true, .max_staleness = 2});
  CHECK(is_async(async.reduction()));
  CHECK(async.str() == "Towers{gpu:0,gpu:1} split=remainder_last reduce=async_apply(scale_gradient=true, max_staleness=2)");
  CHECK(async.weights(15) == std::vector<double>{0.5, 0.5});
  CHECK(towers.str().find("remainder_last") != std::string::npos);  // builders copy: unchanged
  CHECK(std::string(async.declared_at().file_name()).find("test_towers.cpp") != std::string::npos);
}

TEST_CASE("Towers: bad declarations", "[towers]") {
  REQUIRE_THROWS_WITH(Towers(std::vector<Device>{}), Contains("Towers: no devices") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(Towers{gpu(0)}.reduce(AsyncApply{.max_staleness = -1}), Contains("max_staleness -1") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(Towers{gpu(0)}.reduce(AsyncApply{}).variant(SyncVariant::parameter_server), Contains("variant(parameter_server) on async_apply") && Contains(here(__LINE__)));
  REQUIRE_THROWS_WITH(Towers{gpu(0)}.variant(SyncVariant::replicated).reduce(AsyncApply{}), Contains("AsyncApply after variant(replicated)") && Contains(here(__LINE__)));
}
