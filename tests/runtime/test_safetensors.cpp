// safetensors: the name rule both ways, a user's mapping, PyTorch's layouts, EMA on and off,
// the training state left out, the element types other writers use, and each kind of damaged
// or hostile file named in its error.
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>

#include "runtime/interop/json_subset.h"
#include "runtime/interop/safetensors.h"
#include "runtime/interop/safetensors_format.h"
#include "tests/runtime/interop_bytes.h"

namespace tj = towerjit;
namespace tt = towerjit::testing;
using Catch::Contains;

namespace {

tj::HostTensor counting(tj::Shape shape, float from) {
  tj::HostTensor t(shape);
  for (int64_t i = 0; i < t.size(); ++i) t.f32[i] = from + static_cast<float>(i);
  return t;
}

std::string temp(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("towerjit-st-" + name)).string();
}

// What a trainer of a dense layer, a conv layer and a batch norm holds after training with
// Adam and EMA: the model, Adam's slots, the shadows and the step.
tj::HostVariables trained() {
  tj::HostVariables v;
  v["fc1/kernel"] = counting({3, 7}, 0);      // [in, out]
  v["fc1/bias"] = counting({7}, 100);
  v["conv1/kernel"] = counting({4, 1, 3, 3}, 200);  // [filters, channels, kh, kw]
  v["conv1_bn/gamma"] = counting({4}, 300);
  v["conv1_bn/beta"] = counting({4}, 310);
  v["conv1_bn/moving_mean"] = counting({4}, 320);
  v["conv1_bn/moving_variance"] = counting({4}, 330);
  for (const char* w : {"fc1/kernel", "fc1/bias", "conv1/kernel", "conv1_bn/gamma", "conv1_bn/beta"}) {
    v[std::string(w) + "/adam_m"] = counting(v[w].shape, -1);
    v[std::string(w) + "/adam_v"] = counting(v[w].shape, -2);
    v[std::string(w) + "/ema"] = counting(v[w].shape, 1000);
  }
  v["global_step"] = tj::scalar(12);
  return v;
}

tj::SafetensorsFile read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return tj::decode_safetensors(bytes, path, std::source_location::current());
}

tj::SafetensorsFile decode(const std::string& bytes) {
  return tj::decode_safetensors(bytes, "w.safetensors", std::source_location::current());
}

}  // namespace

TEST_CASE("safetensors: towerjit's names map to PyTorch's by the rule", "[interop][safetensors]") {
  CHECK(tj::pytorch_name("fc1/kernel") == "fc1.weight");
  CHECK(tj::pytorch_name("fc1/bias") == "fc1.bias");
  CHECK(tj::pytorch_name("block1/a/kernel") == "block1.a.weight");
  CHECK(tj::pytorch_name("conv1_bn/gamma") == "conv1_bn.weight");
  CHECK(tj::pytorch_name("conv1_bn/beta") == "conv1_bn.bias");
  CHECK(tj::pytorch_name("conv1_bn/moving_mean") == "conv1_bn.running_mean");
  CHECK(tj::pytorch_name("block2/b_bn/moving_variance") == "block2.b_bn.running_var");
  CHECK(tj::pytorch_name("embedding/table") == "embedding.table");
  CHECK(tj::pytorch_name("kernel") == "weight");
}

TEST_CASE("safetensors: saved under PyTorch's names and layouts, training state left out", "[interop][safetensors]") {
  const auto v = trained();
  const std::string path = temp("plain.safetensors");
  tj::save_safetensors(v, path, {.metadata = {{"format", "pt"}}});
  const auto file = read(path);
  std::vector<std::string> names;
  for (const auto& [name, t] : file.tensors) names.push_back(name);
  CHECK(names == std::vector<std::string>{"conv1.weight", "conv1_bn.bias", "conv1_bn.running_mean",
                                          "conv1_bn.running_var", "conv1_bn.weight", "fc1.bias", "fc1.weight"});
  CHECK(file.metadata == std::map<std::string, std::string>{{"format", "pt"}});
  // The dense kernel [3, 7] becomes nn.Linear's [7, 3]: weight[o][i] = kernel[i][o].
  const auto& w = file.tensors.at("fc1.weight");
  REQUIRE(w.shape == tj::Shape{7, 3});
  for (int o = 0; o < 7; ++o)
    for (int i = 0; i < 3; ++i) CHECK(w.f32[o * 3 + i] == v.at("fc1/kernel").f32[i * 7 + o]);
  // The conv kernel is nn.Conv2d's layout already.
  CHECK(file.tensors.at("conv1.weight").shape == tj::Shape{4, 1, 3, 3});
  CHECK(file.tensors.at("conv1.weight").f32 == v.at("conv1/kernel").f32);
  CHECK(file.tensors.at("conv1_bn.running_var").f32 == v.at("conv1_bn/moving_variance").f32);
  // towerjit's own layout on request.
  tj::save_safetensors(v, path, {.pytorch_layout = false});
  CHECK(read(path).tensors.at("fc1.weight").f32 == v.at("fc1/kernel").f32);
}

TEST_CASE("safetensors: EMA on saves the shadows, off the variables", "[interop][safetensors]") {
  const auto v = trained();
  const std::string path = temp("ema.safetensors");
  tj::save_safetensors(v, path, {.ema = true});
  auto file = read(path);
  CHECK(file.tensors.at("fc1.bias").f32 == v.at("fc1/bias/ema").f32);
  CHECK(file.tensors.at("conv1_bn.weight").f32 == v.at("conv1_bn/gamma/ema").f32);
  CHECK(file.tensors.at("conv1_bn.running_mean").f32 == v.at("conv1_bn/moving_mean").f32);  // no shadow: itself
  tj::save_safetensors(v, path, {.ema = false});
  CHECK(read(path).tensors.at("fc1.bias").f32 == v.at("fc1/bias").f32);
  tj::HostVariables plain = {{"fc1/bias", counting({7}, 0)}};
  CHECK_THROWS_WITH(tj::save_safetensors(plain, path, {.ema = true}),
                    Contains("EMA weights were asked for, but no variable has an EMA shadow (\"<variable>/ema\")"));
}

TEST_CASE("safetensors: load maps the names and layouts back, with a user's mapping", "[interop][safetensors]") {
  const auto v = trained();
  const std::string path = temp("back.safetensors");
  tj::save_safetensors(v, path);
  const auto back = tj::load_safetensors(path, v);
  CHECK(back.size() == 7);
  for (const auto& [name, t] : back) {
    INFO(name);
    CHECK(t.shape == v.at(name).shape);
    CHECK(t.f32 == v.at(name).f32);
  }
  // An nn.Sequential's names, given by the user for two variables; the rule for the rest.
  const tj::SafetensorsOptions sequential = {.names = {{"fc1/kernel", "0.weight"}, {"fc1/bias", "0.bias"}}};
  tj::save_safetensors(v, path, sequential);
  const auto file = read(path);
  CHECK(file.tensors.count("0.weight"));
  CHECK(file.tensors.at("0.weight").shape == tj::Shape{7, 3});
  CHECK_FALSE(file.tensors.count("fc1.weight"));
  CHECK(tj::load_safetensors(path, v, sequential).at("fc1/kernel").f32 == v.at("fc1/kernel").f32);
  CHECK_THROWS_WITH(tj::load_safetensors(path, v),
                    Contains("has no tensor \"fc1.bias\" for the variable \"fc1/bias\"") &&
                        Contains("map the name in SafetensorsOptions::names"));
  CHECK_THROWS_WITH(tj::save_safetensors(v, path, {.names = {{"fc1/bias", "fc1.weight"}}}),
                    Contains("would both be saved as \"fc1.weight\""));
}

TEST_CASE("safetensors: loading another model's file is a named error", "[interop][safetensors][errors]") {
  const auto v = trained();
  const std::string path = temp("other.safetensors");
  tj::save_safetensors(v, path);
  auto wider = v;
  wider["fc1/kernel"] = counting({3, 8}, 0);
  CHECK_THROWS_WITH(tj::load_safetensors(path, wider),
                    Contains("tensor \"fc1.weight\" of \"" + path + "\" is [7,3] but the variable \"fc1/kernel\" is [3,8], "
                             "which a PyTorch file holds transposed, as [8,3] (nn.Linear's [out, in])"));
  auto fewer = v;  // without the conv layer (its kernel, slots and shadow)
  std::erase_if(fewer, [](const auto& kv) { return kv.first.starts_with("conv1/"); });
  CHECK_THROWS_WITH(tj::load_safetensors(path, fewer),
                    Contains("holds the tensor \"conv1.weight\", which no variable of the model takes"));
  CHECK(tj::load_safetensors(path, fewer, {.strict = false}).size() == 6);  // the batch norm's 4, the dense's 2
  auto integer = v;
  integer["fc1/bias"] = tj::HostTensor(tj::Shape{7}, tj::DType::i32);
  CHECK_THROWS_WITH(tj::load_safetensors(path, integer),
                    Contains("holds floats but the variable \"fc1/bias\" is i32"));
}

TEST_CASE("safetensors: F16, BF16, F64, I64, BOOL and U8 tensors of other writers convert", "[interop][safetensors]") {
  std::string data = tt::le(0x3c00, 2) + tt::le(0xc000, 2) + tt::le(0x0001, 2)  // f16 1, -2, 2^-24
                     + tt::le(0x3fc0, 2)                                        // bf16 1.5
                     + tt::element_bytes(0.1, false)                            // f64 0.1
                     + tt::element_bytes(int64_t{-5}, false) + std::string("\x01\x00", 2) + "\xff";
  const std::string header =
      R"({"h":{"dtype":"F16","shape":[3],"data_offsets":[0,6]},"b":{"dtype":"BF16","shape":[],"data_offsets":[6,8]},)"
      R"("d":{"dtype":"F64","shape":[1],"data_offsets":[8,16]},"i":{"dtype":"I64","shape":[1,1],"data_offsets":[16,24]},)"
      R"("t":{"dtype":"BOOL","shape":[2],"data_offsets":[24,26]},"u":{"dtype":"U8","shape":[1],"data_offsets":[26,27]},)"
      R"("__metadata__":{"k":"v\u00e9"}})";
  const auto file = decode(tt::safetensors_bytes(header, data));
  CHECK(file.tensors.at("h").f32 == std::vector<float>{1, -2, std::ldexp(1.0f, -24)});
  CHECK(file.tensors.at("b").f32 == std::vector<float>{1.5f});
  CHECK(file.tensors.at("d").f32 == std::vector<float>{0.1f});
  CHECK(file.tensors.at("i").i32 == std::vector<int32_t>{-5});
  CHECK(file.tensors.at("t").i32 == std::vector<int32_t>{1, 0});
  CHECK(file.tensors.at("u").i32 == std::vector<int32_t>{255});
  CHECK(file.metadata.at("k") == "v\xc3\xa9");
}

TEST_CASE("safetensors: damaged and hostile files are named errors", "[interop][safetensors][errors]") {
  const std::string entry = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string ok = tt::safetensors_bytes(entry, std::string(8, '\0'));
  CHECK(decode(ok).tensors.at("w").size() == 2);
  CHECK_THROWS_WITH(decode("abc"), Contains("\"w.safetensors\" is 3 bytes long, too short for a safetensors file"));
  CHECK_THROWS_WITH(decode(tt::le(uint64_t{1} << 40, 8) + "{}"),
                    Contains("claims a header of 1099511627776 bytes but safetensors headers are at most 100 MB"));
  CHECK_THROWS_WITH(decode(ok.substr(0, 20)), Contains("claims a header of 54 bytes but holds only 12 after its length"));
  CHECK_THROWS_WITH(decode(ok.substr(0, ok.size() - 1)),
                    Contains("holds 7 data bytes but its tensors cover 8; the file is truncated"));
  CHECK_THROWS_WITH(decode(ok + "x"), Contains("holds 9 data bytes but its tensors cover 8; the file is damaged"));
  CHECK_THROWS_WITH(decode(tt::safetensors_bytes(R"({"w":[1,2})", "")),
                    Contains("has a damaged safetensors header: its JSON is malformed (a missing ',' or ']' at byte 9)"));
  CHECK_THROWS_WITH(decode(tt::safetensors_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                                 R"("w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                                                 std::string(16, '\0'))),
                    Contains("the key \"w\" given twice"));
  CHECK_THROWS_WITH(decode(tt::safetensors_bytes(R"({"w":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})",
                                                 std::string(8, '\0'))),
                    Contains("tensor \"w\" has dtype \"C64\", which towerjit does not read"));
  CHECK_THROWS_WITH(decode(tt::safetensors_bytes(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
                                                 std::string(8, '\0'))),
                    Contains("tensor \"w\" is [3] F32, 12 bytes, but its data_offsets [0, 8] say otherwise"));
  // A shape of 2^96 elements, and one of 2^62 that claims far more than the file holds.
  CHECK_THROWS_WITH(decode(tt::safetensors_bytes(
                        R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,0]}})", "")),
                    Contains("tensor \"w\"'s shape has more elements than a tensor can hold"));
  CHECK_THROWS_WITH(decode(tt::safetensors_bytes(
                        R"({"w":{"dtype":"U8","shape":[1073741824,4],"data_offsets":[0,4294967296]}})", "")),
                    Contains("holds 0 data bytes but its tensors cover 4294967296; the file is truncated"));
  // A gap and an overlap between tensors (the buffer must be covered exactly).
  CHECK_THROWS_WITH(decode(tt::safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                                 R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                                 std::string(12, '\0'))),
                    Contains("tensor \"b\" begins at byte 8 of the data, where a gap"));
  CHECK_THROWS_WITH(decode(tt::safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                                 R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                                 std::string(8, '\0'))),
                    Contains("tensor \"b\" begins at byte 4 of the data, where an overlap"));
  CHECK_THROWS_WITH(decode(tt::safetensors_bytes(R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
                                                 tt::element_bytes(int64_t{1} << 33, false))),
                    Contains("tensor \"w\" holds the int64 value 8589934592 at element 0, outside int32's range"));
  CHECK_THROWS_WITH(decode(tt::safetensors_bytes(R"([[[[[[[[[[[[1]]]]]]]]]]]])", "")), Contains("nesting deeper than 4"));
  CHECK_THROWS_WITH(tj::load_safetensors("/nonexistent/w.safetensors", {}),
                    Contains("\"/nonexistent/w.safetensors\" does not exist or is not a file"));
}

TEST_CASE("safetensors: a header of the wrong shape names the field", "[interop][safetensors][errors]") {
  auto header = [](const std::string& json, size_t data = 0) {
    return decode(tt::safetensors_bytes(json, std::string(data, '\0')));
  };
  CHECK_THROWS_WITH(header("[1]"), Contains("has a damaged safetensors header: it is not a JSON object"));
  CHECK_THROWS_WITH(header(R"({"w":[0,4]})"), Contains("tensor \"w\" is an array, not an object"));
  CHECK_THROWS_WITH(header(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"device":"cuda"}})", 4),
                    Contains("tensor \"w\" has an unknown field \"device\""));
  CHECK_THROWS_WITH(header(R"({"w":{"dtype":"F32","shape":[1]}})"),
                    Contains("tensor \"w\" lacks \"dtype\", \"shape\" or \"data_offsets\""));
  CHECK_THROWS_WITH(header(R"({"w":{"dtype":32,"shape":[1],"data_offsets":[0,4]}})", 4),
                    Contains("tensor \"w\"'s dtype is not a string"));
  CHECK_THROWS_WITH(header(R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", 4),
                    Contains("tensor \"w\"'s shape is not an array of at most 32 dimensions"));
  CHECK_THROWS_WITH(header(R"({"w":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}})", 4),
                    Contains("tensor \"w\"'s shape holds a string"));
  CHECK_THROWS_WITH(header(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4),
                    Contains("tensor \"w\"'s data_offsets is not [begin, end]"));
  CHECK_THROWS_WITH(header(R"({"__metadata__":[]})"), Contains("\"__metadata__\" is not an object"));
  CHECK_THROWS_WITH(header(R"({"__metadata__":{"epoch":3}})"), Contains("metadata \"epoch\" is not a string"));
}

TEST_CASE("safetensors: what cannot be written is named", "[interop][safetensors][errors]") {
  tj::HostTensor short_of_values(tj::Shape{2, 3});
  short_of_values.f32.pop_back();
  const auto loc = std::source_location::current();
  CHECK_THROWS_WITH(tj::encode_safetensors({{{"w", short_of_values}}}, loc),
                    Contains("tensor \"w\" is [2,3] but holds 5 values; fill it"));
  CHECK_THROWS_WITH(tj::encode_safetensors({{{"__metadata__", tj::scalar(1)}}}, loc),
                    Contains("a tensor may not be named \"__metadata__\" in a safetensors file; rename it"));
}

TEST_CASE("json subset: strict where a lenient reader would guess", "[interop][safetensors]") {
  tj::json::Value v;
  std::string error;
  CHECK(tj::json::parse(R"( {"a": [1, 2, {"b": "c\"\\\/\n\u0041\ud83d\ude00"}]} )", v, error));
  CHECK(v.find("a")->items[2].find("b")->text == "c\"\\/\nA\xf0\x9f\x98\x80");
  for (const char* bad : {"{\"a\":1,}", "[01]", "[1.5]", "[-1]", "[true]", "[null]", "\"\x01\"", "[18446744073709551616]",
                          "{\"a\":1} x", "\"\\ud800\"", "\"\\x\"", "{1:2}"}) {
    INFO(bad);
    CHECK_FALSE(tj::json::parse(bad, v, error));
  }
  CHECK(tj::json::quote("a\"b\\\n") == "\"a\\\"b\\\\\\u000a\"");
}
