// SIGINT and SIGTERM during fit(): the step in progress finishes, the hooks end (a final
// checkpoint), fit throws Interrupted; an ignored signal stays ignored, the previous handler
// comes back, stop_on_signals = false leaves the process's own handler alone, and a second
// signal ends the process at once (in a child process: it would end this one).
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/towers/fit.h"
#include "runtime/towers/hooks.h"
#include "runtime/towers/interrupts.h"
#include "tests/faults/child_process.h"
#include "tests/jit/cpu_test_env.h"
#include "tests/runtime/tower_test_model.h"

namespace tj = towerjit;
using Catch::Matchers::Contains;

namespace {

struct Model {
  explicit Model(tj::Towers towers = tj::Towers({tj::cpu(0)})) : trainer(graph, loss, std::move(towers), tj::adam(0.01), {.seed = 5}) {}
  tj::Graph graph;
  tj::Tensor loss = tj::testing::small_mlp_loss(graph);
  tj::TowerTrainer trainer;
};

// Raises `signal` in its after_step of step `at`; records what fit tells it.
struct SignalAt : tj::Hook {
  int signal = 0;
  int64_t at = 0;
  std::vector<int64_t> steps;
  int ended_by = -1;
  void after_step(tj::TowerTrainer&, const tj::StepEvent& e) override {
    steps.push_back(e.step);
    if (e.step == at) ::raise(signal);  // to this thread: handled before raise returns
  }
  void end(tj::TowerTrainer&, const tj::StepEvent& last) override { ended_by = last.stopped_by; }
};

std::atomic<int> own_handler_calls{0};
extern "C" void own_handler(int) { ++own_handler_calls; }

// Sets `handler` for SIGINT for the scope, then puts back what was there.
struct ScopedHandler {
  struct sigaction old = {};
  explicit ScopedHandler(void (*handler)(int)) {
    struct sigaction a = {};
    a.sa_handler = handler;
    sigemptyset(&a.sa_mask);
    ::sigaction(SIGINT, &a, &old);
  }
  ~ScopedHandler() { ::sigaction(SIGINT, &old, nullptr); }
  static void (*current())(int) {
    struct sigaction now = {};
    ::sigaction(SIGINT, nullptr, &now);
    return now.sa_handler;
  }
};

}  // namespace

TEST_CASE("SIGINT during fit finishes the step, writes a final checkpoint and throws Interrupted", "[faults][hooks]") {
  tj::test::TempDir work;
  const tj::data::TensorDataset data(tj::testing::batch_of(64, 11), "labels");
  for (const int signal : {SIGINT, SIGTERM}) {
    INFO(tj::signal_name(signal));
    const std::string dir = work.path() + "/" + tj::signal_name(signal);
    Model m;
    tj::data::BatchPipeline pipeline(data, {.batch = 8, .seed = 3});
    SignalAt probe;
    probe.signal = signal;
    probe.at = 3;
    tj::CheckpointHook save(dir, {}, /*every=*/0);  // only at epochs' ends and at the end
    ScopedHandler mine(own_handler);
    own_handler_calls = 0;
    try {
      tj::fit(m.trainer, pipeline, {.epochs = 5, .hooks = {&probe, &save}});
      FAIL("fit returned");
    } catch (const tj::Interrupted& stop) {
      CHECK(stop.signal() == signal);
      CHECK(stop.exit_code() == 128 + signal);
      CHECK(stop.step() == 3);
      CHECK_THAT(stop.what(), Contains("training stopped by " + tj::signal_name(signal) + " after step 3 (epoch 1, batch 3 of 8)") &&
                                  Contains("the newest checkpoint, " + dir + "/ckpt-3.tjck, is kept: resume from it") &&
                                  Contains("test_interrupts.cpp:"));
    }
    CHECK(probe.steps == std::vector<int64_t>{1, 2, 3});  // no batch after the signal
    CHECK(probe.ended_by == signal);
    CHECK(tj::load_checkpoint(dir).step == 3);
    CHECK(tj::load_checkpoint(dir).position == tj::data::PipelinePosition{0, 3});
    CHECK(own_handler_calls == 0);  // fit's handler had it...
    CHECK(ScopedHandler::current() == own_handler);  // ...and put this one back
  }
}

TEST_CASE("free-running async towers stop on SIGTERM after the step, with no batch after it applied", "[faults][hooks]") {
  const tj::data::TensorDataset data(tj::testing::batch_of(64, 11), "labels");
  Model m(tj::Towers({tj::cpu(0), tj::cpu(1)}).reduce(tj::AsyncApply{}));
  tj::data::BatchPipeline pipeline(data, {.batch = 8, .seed = 3});
  SignalAt probe;  // uses the trainer at every step: the towers stop there, as for a checkpoint
  probe.signal = SIGTERM;
  probe.at = 3;
  CHECK_THROWS_AS(tj::fit(m.trainer, pipeline, {.epochs = 5, .hooks = {&probe}}), tj::Interrupted);
  CHECK(probe.steps == std::vector<int64_t>{1, 2, 3});
  CHECK(m.trainer.applies() == 6);  // two towers, three batches
}

TEST_CASE("fit leaves an ignored SIGINT ignored, and with stop_on_signals false the process's own handler",
          "[faults][hooks]") {
  const tj::data::TensorDataset data(tj::testing::batch_of(32, 11), "labels");
  SECTION("ignored") {
    ScopedHandler ignored(SIG_IGN);
    Model m;
    tj::data::BatchPipeline pipeline(data, {.batch = 8, .seed = 3});
    SignalAt probe;
    probe.signal = SIGINT;
    probe.at = 2;
    CHECK(tj::fit(m.trainer, pipeline, {.epochs = 1, .hooks = {&probe}}).step == 4);
    CHECK(probe.ended_by == 0);
  }
  SECTION("not watched") {
    ScopedHandler mine(own_handler);
    own_handler_calls = 0;
    Model m;
    tj::data::BatchPipeline pipeline(data, {.batch = 8, .seed = 3});
    SignalAt probe;
    probe.signal = SIGINT;
    probe.at = 2;
    CHECK(tj::fit(m.trainer, pipeline, {.epochs = 1, .hooks = {&probe}, .stop_on_signals = false}).step == 4);
    CHECK(own_handler_calls == 1);
  }
}

TEST_CASE("a second SIGINT ends a run that is winding down at once", "[faults][hooks]") {
  tj::test::TempDir work;
  // The child waits a minute in its hooks' end once a signal stopped it: only the default
  // action of the second signal ends it sooner.
  tj::testing::ChildProcess child(tj::testing::fault_child_path(), {"train", work.path() + "/c", "100000000", "linger"});
  REQUIRE(!child.wait_for_line("start").empty());
  const auto sent = std::chrono::steady_clock::now();
  child.signal(SIGINT);
  REQUIRE(!child.wait_for_line("towerjit: SIGINT received", std::chrono::seconds(20)).empty());
  child.signal(SIGINT);
  const int code = child.exit_code();
  INFO(child.output());
  CHECK(code == -SIGINT);  // ended by the signal itself, not by an exit
  CHECK(std::chrono::steady_clock::now() - sent < std::chrono::seconds(30));
  CHECK(child.output().find("training stopped by") == std::string::npos);
}

// A program with no try block (docs/getting-started.md's first one): what fit throws on Ctrl-C
// ends it with the message and 130, not std::terminate's abort (dsl/uncaught_errors.cpp); any
// uncaught towerjit::Error likewise with 1; other exceptions still go to std::terminate.
TEST_CASE("an uncaught Interrupted or Error ends the program with its message and exit code, not an abort",
          "[faults][hooks]") {
  tj::test::TempDir work;
  {
    tj::testing::ChildProcess child(tj::testing::fault_child_path(), {"train", work.path() + "/c", "100000000", "uncaught"});
    REQUIRE(!child.wait_for_line("start").empty());
    child.signal(SIGINT);
    const int code = child.exit_code();
    INFO(child.output());
    CHECK(code == 130);
    CHECK(child.output().find("towerjit: training stopped by SIGINT after step ") != std::string::npos);
    CHECK(child.output().find("terminate called") == std::string::npos);
  }
  {
    tj::testing::ChildProcess child(tj::testing::fault_child_path(), {"throw", "error"});
    const int code = child.exit_code();
    INFO(child.output());
    CHECK(code == 1);
    CHECK(child.output().find("towerjit: an error nothing catches\n") != std::string::npos);
    CHECK(child.output().find("terminate called") == std::string::npos);
  }
  {
    tj::testing::ChildProcess child(tj::testing::fault_child_path(), {"throw", "other"});
    const int code = child.exit_code();
    INFO(child.output());
    CHECK(code == -SIGABRT);
    CHECK(child.output().find("terminate called after throwing an instance of 'std::logic_error'") != std::string::npos);
  }
}
