// The reporting pieces of a training run: metrics JSON lines, SVG plots, the Chrome trace and
// the progress line. Each output is parsed back with a strict checker (below), so "valid JSON"
// and "well-formed SVG" are tested, not assumed.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "dsl/error.h"
#include "runtime/report/metrics.h"
#include "runtime/report/progress.h"
#include "runtime/report/svg_plot.h"
#include "runtime/report/trace.h"

// Where each mistake below is reported: the line of this file that made it (checked as the
// file, the line being the call's).
static const std::string here = "tests/runtime/test_report.cpp:";

namespace fs = std::filesystem;
namespace rp = towerjit::report;

namespace {

// A strict JSON reader (RFC 8259: no NaN, no trailing commas), small enough to trust.
struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  double number = 0;
  std::string text;
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> fields;
  const Json* get(const std::string& key) const {
    for (const auto& [k, v] : fields)
      if (k == key) return &v;
    return nullptr;
  }
};

class JsonReader {
 public:
  static Json parse(const std::string& s) {
    JsonReader r(s);
    Json v = r.value();
    r.space();
    if (r.i_ != s.size()) r.fail("text after the value");
    return v;
  }

 private:
  explicit JsonReader(const std::string& s) : s_(s) {}
  [[noreturn]] void fail(const std::string& why) {
    throw std::runtime_error("invalid JSON: " + why + " at " + std::to_string(i_) + ": " + s_.substr(i_, 40));
  }
  void space() {
    while (i_ < s_.size() && std::strchr(" \t\r\n", s_[i_]) != nullptr) ++i_;
  }
  bool take(char c) {
    space();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  bool word(const char* w) {
    if (s_.compare(i_, std::strlen(w), w) != 0) return false;
    i_ += std::strlen(w);
    return true;
  }
  std::string string() {
    if (!take('"')) fail("expected a string");
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      if (static_cast<unsigned char>(s_[i_]) < 0x20) fail("raw control character in a string");
      if (s_[i_] == '\\') {
        ++i_;
        if (i_ < s_.size() && s_[i_] == 'u') {
          if (i_ + 4 >= s_.size()) fail("short \\u escape");
          out += static_cast<char>(std::stoi(s_.substr(i_ + 1, 4), nullptr, 16));
          i_ += 4;
        } else if (i_ >= s_.size() || std::strchr("\"\\/bfnrt", s_[i_]) == nullptr) {
          fail("bad escape");
        } else {
          out += s_[i_];
        }
        ++i_;
      } else {
        out += s_[i_++];
      }
    }
    if (!take('"')) fail("unterminated string");
    return out;
  }
  double number() {
    const size_t start = i_;
    auto digits = [&] {
      const size_t from = i_;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
      if (i_ == from) fail("expected digits");
    };
    if (s_[i_] == '-') ++i_;
    if (i_ < s_.size() && s_[i_] == '0') ++i_;
    else digits();
    if (i_ < s_.size() && s_[i_] == '.') ++i_, digits();
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      digits();
    }
    return std::stod(s_.substr(start, i_ - start));
  }
  Json value() {
    space();
    Json v;
    if (i_ >= s_.size()) fail("unexpected end");
    if (s_[i_] == '{') {
      v.kind = Json::Object, ++i_;
      if (take('}')) return v;
      do {
        space();
        std::string key = string();
        if (!take(':')) fail("expected ':'");
        v.fields.emplace_back(key, value());
      } while (take(','));
      if (!take('}')) fail("expected '}'");
    } else if (s_[i_] == '[') {
      v.kind = Json::Array, ++i_;
      if (take(']')) return v;
      do v.items.push_back(value());
      while (take(','));
      if (!take(']')) fail("expected ']'");
    } else if (s_[i_] == '"') {
      v.kind = Json::String, v.text = string();
    } else if (word("null")) {
      v.kind = Json::Null;
    } else if (word("true")) {
      v.kind = Json::Bool, v.number = 1;
    } else if (word("false")) {
      v.kind = Json::Bool;
    } else if (s_[i_] == '-' || std::isdigit(static_cast<unsigned char>(s_[i_]))) {
      v.kind = Json::Number, v.number = number();
    } else {
      fail("unexpected character");
    }
    return v;
  }

  const std::string& s_;
  size_t i_ = 0;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A path named per process (ctest runs test cases in parallel, and other build directories run
// these too), removed with whatever is there when the test ends.
struct TempPath {
  explicit TempPath(const std::string& name)
      : path((fs::temp_directory_path() / ("towerjit-report-" + std::to_string(getpid()) + "-" + name)).string()) {}
  ~TempPath() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  const std::string path;
};

std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  return out;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Tags nest properly and exactly one element (the root <svg>) encloses everything.
bool balanced_xml(const std::string& xml, std::string& root) {
  std::vector<std::string> open;
  int roots = 0;
  for (size_t at = xml.find('<'); at != std::string::npos; at = xml.find('<', at + 1)) {
    const size_t end = xml.find('>', at);
    if (end == std::string::npos) return false;
    const std::string tag = xml.substr(at + 1, end - at - 1);
    const std::string name = tag.substr(tag[0] == '/', tag.find_first_of(" />", 1) - (tag[0] == '/'));
    if (tag[0] == '/') {
      if (open.empty() || open.back() != name) return false;
      open.pop_back();
    } else if (tag.back() != '/') {
      if (open.empty()) ++roots, root = name;
      open.push_back(name);
    } else if (open.empty()) {
      return false;
    }
  }
  return open.empty() && roots == 1;
}

}  // namespace

TEST_CASE("report: metrics lines read back exactly as written", "[report]") {
  const TempPath temp("roundtrip.jsonl");
  const std::string& path = temp.path;
  {
    rp::MetricsWriter writer(path);
    writer.log_step({1, 1, 2.302585092994046, 1e-3, 15873.25});
    writer.log_step({2, 1, 0.1 + 0.2, 1e-5, 1e9});
    writer.log_eval({469, 1, 0.8488, 0.41703});
  }
  const auto log = rp::read_metrics(path);
  REQUIRE(log.steps.size() == 2);
  REQUIRE(log.evals.size() == 1);
  CHECK(log.steps[0].loss == 2.302585092994046);  // the shortest round-trip form: exact
  CHECK(log.steps[1].loss == 0.1 + 0.2);
  CHECK(log.steps[1].lr == 1e-5);
  CHECK(log.steps[1].samples_per_s == 1e9);
  CHECK(log.evals[0].step == 469);
  CHECK(log.evals[0].test_accuracy == 0.8488);
  for (const auto& line : lines_of(read_file(path))) {
    const Json o = JsonReader::parse(line);
    REQUIRE(o.kind == Json::Object);
    const bool step = o.get("kind")->text == "step";
    for (const char* key : step ? std::vector<const char*>{"step", "epoch", "loss", "lr", "samples_per_s"}
                                : std::vector<const char*>{"step", "epoch", "test_accuracy", "test_loss"})
      CHECK(o.get(key) != nullptr);
  }
}

TEST_CASE("report: a resumed run keeps the metrics up to its step and drops the later ones", "[report]") {
  const TempPath temp("resumed.jsonl");
  {
    rp::MetricsWriter writer(temp.path);
    for (int64_t step = 1; step <= 6; ++step) {
      writer.log_step({step, 1, 1.0 / step, 1e-3, 100});
      if (step % 2 == 0) writer.log_eval({step, 1, 0.5, 0.7});
    }
  }
  {
    rp::MetricsWriter resumed(temp.path, 4);  // the checkpoint was at step 4; 5 and 6 are lost
    resumed.log_step({5, 1, 0.25, 1e-3, 100});
  }
  const auto log = rp::read_metrics(temp.path);
  REQUIRE(log.steps.size() == 5);
  CHECK(log.steps[3].step == 4);
  CHECK(log.steps[4].loss == 0.25);
  REQUIRE(log.evals.size() == 2);
  CHECK(log.evals[1].step == 4);
  rp::MetricsWriter fresh(temp.path + ".new", 10);  // no file yet: an empty start
  CHECK(rp::read_metrics(temp.path + ".new").steps.empty());
  std::remove((temp.path + ".new").c_str());
}

TEST_CASE("report: a NaN or infinite metric is written as null and the line stays valid JSON", "[report]") {
  const TempPath temp("nan.jsonl");
  const std::string& path = temp.path;
  {
    rp::MetricsWriter writer(path);
    writer.log_step({7, 1, std::nan(""), 0.01, INFINITY});
    writer.log_eval({7, 1, -INFINITY, std::nan("")});
  }
  const auto lines = lines_of(read_file(path));
  REQUIRE(lines.size() == 2);
  const Json step = JsonReader::parse(lines[0]);  // throws on NaN, Infinity or a bare nan
  CHECK(step.get("loss")->kind == Json::Null);
  CHECK(step.get("samples_per_s")->kind == Json::Null);
  CHECK(step.get("lr")->number == 0.01);
  CHECK(JsonReader::parse(lines[1]).get("test_accuracy")->kind == Json::Null);
  const auto log = rp::read_metrics(path);
  CHECK(std::isnan(log.steps[0].loss));
  CHECK(std::isnan(log.evals[0].test_loss));
}

TEST_CASE("report: an unwritable metrics path is named with the reason and the fix", "[report]") {
  CHECK_THROWS_WITH(rp::MetricsWriter("/nonexistent-towerjit-dir/run1/metrics.jsonl"), (Catch::Contains("cannot write the metrics file \"/nonexistent-towerjit-dir/run1/metrics.jsonl\"") &&
                        Catch::Contains("No such file or directory") && Catch::Contains("does not exist") &&
                        Catch::Contains("mkdir -p /nonexistent-towerjit-dir/run1")) && Catch::Contains(here));
  CHECK_THROWS_WITH(rp::MetricsWriter(fs::temp_directory_path().string()), Catch::Contains("is a directory") && Catch::Contains(here));
  CHECK_THROWS_WITH(rp::MetricsWriter(""), Catch::Contains("path is empty") && Catch::Contains(here));
  if (fs::exists("/dev/full")) {  // accepts the open, fails every write with ENOSPC
    rp::MetricsWriter full("/dev/full");
    CHECK_THROWS_WITH(full.log_step({1, 1, 0.5, 0.1, 10}), (Catch::Contains("\"/dev/full\"") && Catch::Contains("No space left")) && Catch::Contains(here));
  }
}

TEST_CASE("report: a damaged metrics file is named by line", "[report]") {
  const TempPath temp("damaged.jsonl");
  const std::string& path = temp.path;
  std::ofstream(path) << "{\"kind\":\"step\",\"step\":1,\"epoch\":1,\"loss\":0.5,\"lr\":0.1,\"samples_per_s\":9}\n"
                      << "\n{\"kind\":\"step\",\"step\":2,\"loss\":nan}\n";
  CHECK_THROWS_WITH(rp::read_metrics(path), (Catch::Contains("line 3") && Catch::Contains("not a metrics record")) && Catch::Contains(here));
  std::ofstream(path) << "{\"kind\":\"eval\",\"step\":1,\"epoch\":1}\n";
  CHECK_THROWS_WITH(rp::read_metrics(path), Catch::Contains("lacks \"test_accuracy\"") && Catch::Contains(here));
  CHECK_THROWS_WITH(rp::read_metrics("/nonexistent-towerjit.jsonl"), Catch::Contains("/nonexistent-towerjit.jsonl") &&
                                                                 Catch::Contains("give the path a MetricsWriter") && Catch::Contains(here));
}

TEST_CASE("report: an SVG plot has one line per series, a legend and round ticks", "[report]") {
  const std::vector<rp::Series> series = {
      {"sync <2 towers> & adam", {{0, 0.87}, {1, 0.61}, {2, 0.45}, {3, 0.23}}},
      {"async", {{0, 0.85}, {1, std::nan("")}, {2, 0.5}, {3, INFINITY}}},
  };
  const std::string svg = rp::svg_plot("Loss", "step", "loss", series);
  std::string root;
  CHECK(balanced_xml(svg, root));
  CHECK(root == "svg");
  CHECK(count(svg, "<path ") == 2);
  CHECK(svg.find("sync &lt;2 towers&gt; &amp; adam") != std::string::npos);  // escaped
  CHECK(svg.find(">async</text>") != std::string::npos);
  CHECK(svg.find("#1f77b4") != std::string::npos);  // two colours
  CHECK(svg.find("#ff7f0e") != std::string::npos);
  CHECK(svg.find(">0.5</text>") != std::string::npos);  // y ticks 0.2, 0.3, ... 0.9
  CHECK(svg.find(">0.9</text>") != std::string::npos);
  CHECK(svg.find("nan") == std::string::npos);
  CHECK(svg.find("inf") == std::string::npos);
  CHECK(count(svg, "<circle") == 6);  // the non-finite points are skipped
}

TEST_CASE("report: an SVG plot of one point or of none still draws", "[report]") {
  const std::string one = rp::svg_plot("Accuracy", "epoch", "accuracy", {{"test accuracy", {{1, 0.85}}}});
  std::string root;
  CHECK(balanced_xml(one, root));
  CHECK(count(one, "<path ") == 1);
  CHECK(count(one, "<circle") == 1);  // a dot, since one point makes no line
  const std::string none = rp::svg_plot("Accuracy", "epoch", "accuracy", {{"test accuracy", {{1, std::nan("")}}}});
  CHECK(balanced_xml(none, root));
  CHECK(count(none, "<path ") == 0);
  CHECK(none.find("no data</text>") != std::string::npos);
  CHECK(none.find("test accuracy (no data)") != std::string::npos);
  CHECK(balanced_xml(rp::svg_plot("", "", "", {}), root));
}

TEST_CASE("report: metrics plots are written next to the metrics file", "[report]") {
  const TempPath temp("plots");
  const fs::path dir = temp.path;
  fs::create_directories(dir);
  const std::string path = (dir / "run.jsonl").string();
  {
    rp::MetricsWriter writer(path);
    for (int step = 1; step <= 20; ++step) writer.log_step({step, 1 + (step - 1) / 10, 2.0 / step, 1e-3, 1000});
    writer.log_eval({10, 1, 0.80, 0.6});
    writer.log_eval({20, 2, 0.85, 0.5});
  }
  const auto plots = rp::write_metrics_plots(path);
  REQUIRE(plots == std::vector<std::string>{(dir / "run-loss.svg").string(), (dir / "run-accuracy.svg").string()});
  const std::string loss = read_file(plots[0]);
  CHECK(loss.find("train loss") != std::string::npos);
  CHECK(loss.find("test loss") != std::string::npos);
  CHECK(count(loss, "<path ") == 3);  // the train loss raw (faint) and smoothed, the test loss
  CHECK(read_file(plots[1]).find("test accuracy") != std::string::npos);
  CHECK_THROWS_WITH(rp::write_svg_plot("/nonexistent-towerjit-dir/loss.svg", "t", "x", "y", {}), Catch::Contains("cannot write the plot \"/nonexistent-towerjit-dir/loss.svg\"") && Catch::Contains(here));
}

TEST_CASE("report: a trace is valid JSON with each tower's spans, names, marks and counters", "[report]") {
  const TempPath temp("trace.json");
  const std::string& path = temp.path;
  {
    rp::Trace trace(path);
    REQUIRE(trace.enabled());
    trace.name_thread(0, "tower 0");
    trace.name_thread(1, "tower 1");
    trace.name_thread(100, "apply");
    std::vector<std::thread> towers;
    for (int t = 0; t < 2; ++t)
      towers.emplace_back([&trace, t] {
        for (int step = 0; step < 50; ++step) {
          auto s = trace.span("forward+backward", "kernel", t, {{"step", step}});
          s.arg("batch", std::size_t{64});  // any integer type
        }
      });
    for (auto& t : towers) t.join();
    const auto start = rp::Trace::now();
    trace.complete("apply \"adam\"\n", "apply", 100, start, start + std::chrono::microseconds(250),
                   {{"staleness", 2}, {"lr", 1e-3}, {"loss", std::nan("")}});
    trace.instant("eval", "eval", 0);
    trace.counter("staleness", 3);
    trace.counter("loss", INFINITY);  // skipped
  }  // the destructor closes the array
  const Json root = JsonReader::parse(read_file(path));
  REQUIRE(root.kind == Json::Object);
  const Json* events = root.get("traceEvents");
  REQUIRE(events != nullptr);
  std::map<std::string, int> by_phase;
  int spans[2] = {0, 0};
  bool named_tower = false, apply_seen = false;
  for (const auto& e : events->items) {
    const std::string ph = e.get("ph")->text;
    ++by_phase[ph];
    REQUIRE(e.get("pid") != nullptr);
    if (ph == "X" && e.get("name")->text == "forward+backward") {
      const int tid = static_cast<int>(e.get("tid")->number);
      ++spans[tid];
      CHECK(e.get("dur")->number >= 0);
      CHECK(e.get("ts")->number >= 0);
      CHECK(e.get("args")->get("batch")->number == 64);
    }
    if (ph == "X" && e.get("tid")->number == 100) {
      apply_seen = true;
      CHECK(e.get("name")->text == "apply \"adam\"\n");
      CHECK(e.get("dur")->number == Approx(250));
      CHECK(e.get("args")->get("loss")->text == "nan");
    }
    if (ph == "M" && e.get("name")->text == "thread_name" && e.get("tid")->number == 0)
      named_tower = e.get("args")->get("name")->text == "tower 0";
    if (ph == "C") CHECK(e.get("args")->get("value")->number == 3);
  }
  CHECK(spans[0] == 50);
  CHECK(spans[1] == 50);
  CHECK(named_tower);
  CHECK(apply_seen);
  CHECK(by_phase["X"] == 101);
  CHECK(by_phase["i"] == 1);
  CHECK(by_phase["C"] == 1);
  CHECK(by_phase["M"] == 7);  // the process name, then a name and a sort index per row
}

TEST_CASE("report: a disabled trace writes nothing and an unwritable one is named", "[report]") {
  rp::Trace off;
  CHECK_FALSE(off.enabled());
  {
    auto s = off.span("k", "kernel", 0, {});
    s.arg("ignored", 1);
  }
  off.counter("c", 1);
  off.close();
  CHECK_FALSE(rp::Trace("").enabled());
  CHECK_THROWS_WITH(rp::Trace("/nonexistent-towerjit-dir/trace.json"), (Catch::Contains("cannot write the trace file \"/nonexistent-towerjit-dir/trace.json\"") &&
                        Catch::Contains("mkdir -p")) && Catch::Contains(here));
  // A span still open at close() ends without writing, and the file stays valid.
  const TempPath temp("closed.json");
  const std::string& path = temp.path;
  rp::Trace trace(path);
  auto late = trace.span("late", "kernel", 0);
  trace.close();
  late.end();
  CHECK(JsonReader::parse(read_file(path)).get("traceEvents")->items.size() == 1);
}

TEST_CASE("report: progress away from a terminal prints only the plain lines", "[report]") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  {
    rp::Progress progress(10, f);  // a file: not interactive
    CHECK_FALSE(progress.interactive());
    for (int step = 1; step <= 10; ++step) progress.update(1, step, 0.5, 1000);
    progress.line("epoch 1: 10 steps, train loss 0.5000");
    progress.finish();
  }
  CHECK(contents(f) == "epoch 1: 10 steps, train loss 0.5000\n");
  std::fclose(f);
}

TEST_CASE("report: progress on a terminal redraws one line and keeps plain lines above it", "[report]") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  {
    rp::Progress progress(10, f, /*interactive=*/true);
    progress.update(1, 1, 2.5, 1000);
    progress.update(1, 2, 2.0, 1000);  // within 100 ms: not drawn
    progress.line("hello");
    progress.update(1, 10, 0.25, 1200);  // the last step: always drawn
  }  // the destructor ends the bar's line
  const std::string out = contents(f);
  std::fclose(f);
  CHECK(out.find("step 1/10") != std::string::npos);
  CHECK(out.find("\033[Khello\n") != std::string::npos);
  CHECK(out.find("[####################] epoch 1  step 10/10  loss 0.2500  1200 samples/s  ETA 0:00") !=
        std::string::npos);
  CHECK(out.back() == '\n');
  CHECK(count(out, "\n") == 2);  // the plain line and the final newline
}

TEST_CASE("report: progress text has the bar, the step of the total and the ETA as m:ss", "[report]") {
  const rp::Progress unknown(0, stdout, false);
  CHECK(unknown.render(2, 15, 0.5, 100, 3) == "epoch 2  step 15  loss 0.5000  100 samples/s");
  const rp::Progress known(100, stdout, false);
  CHECK(known.render(1, 50, 0.5, 100, 75) ==
        "[##########..........] epoch 1  step 50/100  loss 0.5000  100 samples/s  ETA 1:15");
}

namespace {

// Reads a chart back: each tick label's value and pixel give the axis's linear map, which turns
// a series' path back into data coordinates. Pixels are written to 0.1 px, so a value reads back
// within 0.05 px of its axis's scale.
struct ReadBack {
  double x0 = 0, xv0 = 0, x1 = 0, xv1 = 0;  // two x ticks: pixel and value
  double y0 = 0, yv0 = 0, y1 = 0, yv1 = 0;
  double x_of(double px) const { return xv0 + (px - x0) / (x1 - x0) * (xv1 - xv0); }
  double y_of(double py) const { return yv0 + (py - y0) / (y1 - y0) * (yv1 - yv0); }
  double x_tolerance() const { return 0.051 * std::abs((xv1 - xv0) / (x1 - x0)); }
  double y_tolerance() const { return 0.051 * std::abs((yv1 - yv0) / (y1 - y0)); }
};

double attribute(const std::string& tag, const std::string& name) {
  const size_t at = tag.find(" " + name + "=\"");
  if (at == std::string::npos) throw std::runtime_error("no " + name + " in " + tag);
  return std::stod(tag.substr(at + name.size() + 3));
}

ReadBack axes_of(const std::string& svg) {
  std::vector<std::pair<double, double>> xs, ys;  // (pixel, value)
  for (size_t at = svg.find("<text "); at != std::string::npos; at = svg.find("<text ", at + 1)) {
    const size_t close = svg.find('>', at), end = svg.find("</text>", close);
    const std::string tag = svg.substr(at, close - at), text = svg.substr(close + 1, end - close - 1);
    char* stop = nullptr;
    const double value = std::strtod(text.c_str(), &stop);
    if (text.empty() || *stop != '\0') continue;  // not a tick label
    if (tag.find("text-anchor=\"middle\"") != std::string::npos && attribute(tag, "y") == 376.0)
      xs.emplace_back(attribute(tag, "x"), value);
    else if (tag.find("text-anchor=\"end\"") != std::string::npos && attribute(tag, "x") == 66.0)
      ys.emplace_back(attribute(tag, "y") - 4, value);
  }
  if (xs.size() < 2 || ys.size() < 2) throw std::runtime_error("fewer than two ticks on an axis");
  return {xs.front().first, xs.front().second, xs.back().first, xs.back().second,
          ys.front().first, ys.front().second, ys.back().first, ys.back().second};
}

// The points of the path of series `name`, in data coordinates, and its stroke colour.
std::vector<std::pair<double, double>> series_points(const std::string& svg, const std::string& name,
                                                     std::string* colour = nullptr) {
  const size_t at = svg.find("<path data-series=\"" + name + "\"");
  if (at == std::string::npos) throw std::runtime_error("no series " + name);
  const std::string tag = svg.substr(at, svg.find('>', at) - at);
  const size_t d = tag.find(" d=\"") + 4;
  if (colour) *colour = tag.substr(tag.find("stroke=\"") + 8, 7);
  std::istringstream in(tag.substr(d, tag.find('"', d) - d));
  const ReadBack axes = axes_of(svg);
  std::vector<std::pair<double, double>> points;
  for (std::string move; in >> move;) {
    double px = std::stod(move.substr(1)), py;
    in >> py;
    points.emplace_back(axes.x_of(px), axes.y_of(py));
  }
  return points;
}

}  // namespace

TEST_CASE("report: smooth_ema is TensorBoard's debiased EMA", "[report]") {
  // The closed form of the same average: s_n = sum_k (1-w) w^(n-k) y_k / (1 - w^n).
  const std::vector<double> y = {2.3, 0.69, 0.23, 1.1, 0.5, 0.4, 0.9};
  for (double w : {0.0, 0.6, 0.9, 0.999}) {
    const auto s = rp::smooth_ema(y, w);
    REQUIRE(s.size() == y.size());
    for (size_t n = 1; n <= y.size(); ++n) {
      double sum = 0;
      for (size_t k = 1; k <= n; ++k) sum += (1 - w) * std::pow(w, static_cast<double>(n - k)) * y[k - 1];
      const double expected = w == 0 ? y[n - 1] : sum / (1 - std::pow(w, static_cast<double>(n)));
      CHECK(s[n - 1] == Approx(expected).epsilon(1e-12));  // a few roundings of sums of 7 terms
    }
  }
  CHECK(rp::smooth_ema(y, 0.6)[0] == Approx(2.3).epsilon(1e-15));  // debiased: the first value, not 0.4 * 2.3
  // The values TensorBoard's own test of its smoothing expects for (1, 0.5, 0) at 0.6.
  const auto tb = rp::smooth_ema({1.0, 0.5, 0.0}, 0.6);
  CHECK(tb[0] == Approx(1.0));
  CHECK(tb[1] == Approx(0.6875));
  CHECK(tb[2] == Approx((0.5 * 0.4 + 0.4 * 1 * 0.6) * 0.6 / (1 - 0.216)));
  const auto with_nan = rp::smooth_ema({1.0, std::nan(""), 3.0}, 0.5);
  CHECK(std::isnan(with_nan[1]));                        // passed through
  CHECK(with_nan[2] == Approx((0.25 + 1.5) / 0.75));     // the NaN left the average alone
  CHECK(rp::smooth_ema({0.7, 0.7, 0.7}, 0.6) == std::vector<double>{0.7, 0.7, 0.7});
  CHECK(rp::smooth_ema({}, 0.6).empty());
  CHECK(rp::smooth_ema({5.0}, 0.6) == std::vector<double>{5.0});
}

TEST_CASE("report: metrics plots put evaluations at their steps and smooth the train loss", "[report]") {
  const TempPath temp("stepplots");
  fs::create_directories(temp.path);
  const std::string path = (fs::path(temp.path) / "m.jsonl").string();
  // Two epochs of 7 steps (odd sizes), evaluations every 3 steps and after each epoch.
  std::vector<double> losses;
  std::vector<int64_t> eval_steps;
  {
    rp::MetricsWriter writer(path);
    for (int64_t step = 1; step <= 14; ++step) {
      const int64_t epoch = step <= 7 ? 1 : 2;
      losses.push_back(1.0 / static_cast<double>(step) + (step % 2 ? 0.3 : 0.0));  // noisy, falling
      writer.log_step({step, epoch, losses.back(), 1e-3, 100});
      if (step % 3 == 0 || step == 7 || step == 14) {
        writer.log_eval({step, epoch, 0.5 + 0.03 * static_cast<double>(step), 1.0 / static_cast<double>(step)});
        eval_steps.push_back(step);
      }
    }
  }
  const auto plots = rp::write_metrics_plots(path, {.smoothing = 0.6});
  const std::string loss = read_file(plots[0]), accuracy = read_file(plots[1]);
  std::string root;
  CHECK(balanced_xml(loss, root));
  CHECK(balanced_xml(accuracy, root));

  // Accuracy: one point per evaluation, at its step (not stacked on its epoch), in step order.
  const auto acc = series_points(accuracy, "test accuracy");
  const ReadBack acc_axes = axes_of(accuracy);
  REQUIRE(acc.size() == eval_steps.size());
  for (size_t i = 0; i < acc.size(); ++i) {
    CHECK(std::abs(acc[i].first - static_cast<double>(eval_steps[i])) <= acc_axes.x_tolerance());
    CHECK(std::abs(acc[i].second - (0.5 + 0.03 * static_cast<double>(eval_steps[i]))) <= acc_axes.y_tolerance());
  }
  CHECK(accuracy.find(">step</text>") != std::string::npos);

  // Loss: the raw curve (faint) and the smoothed one, both at every step; the smoothed one is
  // the debiased EMA computed here independently.
  const ReadBack axes = axes_of(loss);
  const auto raw = series_points(loss, "train loss (raw)");
  const auto smooth = series_points(loss, "train loss (smoothed 0.6)");
  REQUIRE(raw.size() == 14);
  REQUIRE(smooth.size() == 14);
  double last = 0;
  for (size_t n = 1; n <= 14; ++n) {
    last = 0.6 * last + 0.4 * losses[n - 1];
    const double expected = last / (1 - std::pow(0.6, static_cast<double>(n)));
    CHECK(std::abs(smooth[n - 1].first - static_cast<double>(n)) <= axes.x_tolerance());
    CHECK(std::abs(smooth[n - 1].second - expected) <= axes.y_tolerance());
    CHECK(std::abs(raw[n - 1].second - losses[n - 1]) <= axes.y_tolerance());
  }
  CHECK(loss.find("stroke-opacity=\"0.3\"") != std::string::npos);  // the raw curve is faint
  CHECK(series_points(loss, "test loss").size() == eval_steps.size());

  // Epoch 1 ends at step 7: one marker, labelled, in both plots.
  for (const std::string* svg : {&loss, &accuracy}) {
    CHECK(count(*svg, "class=\"marker\"") == 1);
    CHECK(svg->find(">epoch 1</text>") != std::string::npos);
    const size_t at = svg->find("class=\"marker\"");
    CHECK(std::abs(axes_of(*svg).x_of(attribute(svg->substr(at, 200), "x1")) - 7) <= axes_of(*svg).x_tolerance());
  }
  CHECK(rp::epoch_markers(rp::read_metrics(path)).size() == 1);
  const std::string outside = rp::svg_plot("t", "step", "y", {{"a", {{10, 1}, {20, 2}}}}, {{3, "epoch 1"}, {15, "epoch 2"}});
  CHECK(count(outside, "class=\"marker\"") == 1);  // the one at step 3 lies left of the axis
  CHECK(outside.find(">epoch 2</text>") != std::string::npos);
}

TEST_CASE("report: several runs keep one colour each in both plots", "[report]") {
  const TempPath temp("runs");
  fs::create_directories(temp.path);
  std::vector<rp::Run> runs(3);
  for (size_t r = 0; r < runs.size(); ++r) {
    runs[r].name = "run" + std::to_string(r);
    for (int64_t step = 1; step <= 9; ++step)
      runs[r].log.steps.push_back({step, 1, 1.0 / static_cast<double>(step + r), 0.1, 10});
    runs[r].log.evals.push_back({9, 1, 0.6 + 0.1 * static_cast<double>(r), 0.5});
  }
  const auto plots = rp::write_runs_plots(runs, temp.path + "/cmp", "three runs");
  const std::string loss = read_file(plots[0]), accuracy = read_file(plots[1]);
  std::vector<std::string> colours;
  for (const auto& run : runs) {
    std::string train, raw, test, acc;
    series_points(loss, run.name + ": train loss (smoothed 0.6)", &train);
    series_points(loss, run.name + ": train loss (raw)", &raw);
    series_points(loss, run.name + ": test loss", &test);
    series_points(accuracy, run.name + ": test accuracy", &acc);
    CHECK(train == raw);
    CHECK(train == test);
    CHECK(train == acc);
    CHECK(std::find(colours.begin(), colours.end(), train) == colours.end());  // a colour of its own
    colours.push_back(train);
  }
}

TEST_CASE("report: an async run's staleness is written only where there is one, and reads back", "[report]") {
  const TempPath temp("staleness.jsonl");
  {
    rp::MetricsWriter writer(temp.path);
    writer.log_step({1, 1, 0.5, 0.1, 10});  // sync: no staleness
    writer.log_step({2, 1, 0.4, 0.1, 10, 1.25});
  }
  const auto lines = lines_of(read_file(temp.path));
  REQUIRE(lines.size() == 2);
  CHECK(JsonReader::parse(lines[0]).get("staleness") == nullptr);
  CHECK(JsonReader::parse(lines[1]).get("staleness")->number == 1.25);
  const auto log = rp::read_metrics(temp.path);
  CHECK(std::isnan(log.steps[0].staleness));
  CHECK(log.steps[1].staleness == 1.25);
}
