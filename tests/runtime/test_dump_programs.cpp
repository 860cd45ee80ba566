// Dumps of any model: a trainer's programs, on CPU towers as on GPU towers, are written as the
// CUDA C (and PTX) a GPU would run, in files named after the program.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "jit/cuda/nvrtc_compiler.h"
#include "towerjit.h"

namespace tj = towerjit;
namespace fs = std::filesystem;
using tj::kBatch;

namespace {

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("towerjit-dump-" + std::to_string(::getpid()) + "-" + name)) {
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
};

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A batch-norm and dropout model on two CPU towers, with its output for predict().
struct Model {
  std::unique_ptr<tj::Graph> graph = std::make_unique<tj::Graph>();
  std::unique_ptr<tj::TowerTrainer> trainer;
  int dropout_line = 0;
};

Model bn_dropout_model() {
  Model m;
  tj::GraphScope use(*m.graph);
  auto x = tj::input("x", {kBatch, 5});
  auto labels = tj::input("labels", {kBatch}, tj::DType::i32);
  auto h = tj::relu(tj::batch_norm(tj::dense(x, 6, "fc1"), "bn"));
  m.dropout_line = __LINE__ + 1;
  h = tj::dropout(h, 0.5);
  auto logits = tj::dense(h, 3, "fc2");
  auto loss = tj::mean(tj::softmax_cross_entropy(logits, labels));
  m.trainer = std::make_unique<tj::TowerTrainer>(*m.graph, loss, tj::Towers({tj::cpu(0), tj::cpu(1)}),
                                                 tj::adam(0.01), tj::TowerTrainerOptions{.logits = logits});
  return m;
}

}  // namespace

TEST_CASE("dump_cuda of a trainer on CPU towers writes every program's CUDA, named after it", "[dump][towers]") {
  const Model m = bn_dropout_model();
  TempDir dir("trainer");
  tj::dump_cuda(*m.trainer, dir.str());
  for (const char* program : {"tower_step", "apply", "predict"}) {
    INFO(program);
    for (const char* ext : {".cu", ".index.json", ".kir"}) CHECK(fs::exists(dir.path / (std::string(program) + ext)));
    if (tj::cuda::nvrtc_available()) CHECK(read(dir.path / (std::string(program) + ".ptx")).find(".entry") != std::string::npos);
  }
  // The tower step draws dropout masks; predict runs in inference, without them.
  CHECK(read(dir.path / "tower_step.index.json").find("\"random_uniform\"") != std::string::npos);
  CHECK(read(dir.path / "predict.index.json").find("\"random_uniform\"") == std::string::npos);
  CHECK(read(dir.path / "tower_step.cu").find("ull, step, ") != std::string::npos);  // a mask drawn in a kernel
  CHECK(read(dir.path / "predict.cu").find("ull, step, ") == std::string::npos);
  // The index points at the user's lines.
  CHECK(read(dir.path / "tower_step.index.json").find("test_dump_programs.cpp:" + std::to_string(m.dropout_line)) !=
        std::string::npos);
  const std::string summary = read(dir.path / "programs.txt");
  CHECK(summary.find("tower_step: every tower") != std::string::npos);
  CHECK(summary.find("predict: predict() and evaluate()") != std::string::npos);
}

TEST_CASE("TOWERJIT_DUMP on CPU towers writes the LLVM IR, the CUDA and the index of every program", "[dump][towers]") {
  TempDir dir("knob");
  ::setenv("TOWERJIT_DUMP", dir.str().c_str(), 1);
  const Model m = bn_dropout_model();
  ::unsetenv("TOWERJIT_DUMP");
  for (const char* program : {"tower_step", "apply", "predict"}) {
    INFO(program);
    for (const char* ext : {".ll", ".cu", ".index.json", ".kir"}) CHECK(fs::exists(dir.path / (std::string(program) + ext)));
  }
}

TEST_CASE("dump_cuda of a graph writes its CUDA under the name given, and an unwritable directory is an error", "[dump]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 7});
  auto y = tj::sum(tj::relu(x) * 2.0, {1});
  TempDir dir("graph");
  const auto paths = tj::dump_cuda(g, {y}, dir.str(), "my_model");
  CHECK(fs::exists(dir.path / "my_model.cu"));
  CHECK(read(dir.path / "my_model.cu").find("__global__") != std::string::npos);
  CHECK(paths.size() >= 3);
  fs::create_directories(dir.path);
  std::ofstream(dir.path / "a_file") << "x";
  CHECK_THROWS_WITH(tj::dump_cuda(g, {y}, (dir.path / "a_file" / "sub").string()),
                    Catch::Contains("cannot write") && Catch::Contains("a_file/sub"));
}

TEST_CASE("backward ops name the forward op they differentiate, under its gradients/ scope", "[dump][autodiff]") {
  tj::Graph g;
  tj::GraphScope use(g);
  auto x = tj::input("x", {kBatch, 4});
  auto y = tj::dense(x, 3, "fc1");
  auto loss = tj::mean(tj::relu(y));
  const auto kernel = *g.find_variable("fc1/kernel");
  const tj::Tensor dw = tj::grad(loss, {tj::Tensor(&g, kernel.node)})[0];
  const tj::Node& n = dw.node();
  REQUIRE(n.grad_of >= 0);
  CHECK(n.scope == "gradients/fc1");
  CHECK(g.node(n.grad_of).op == tj::Op::MatMul);
  CHECK(g.node_str(dw.id()).find("gradient of %" + std::to_string(n.grad_of) + " matmul") != std::string::npos);
  TempDir dir("grad");
  tj::dump_cuda(g, {dw}, dir.str(), "backward");
  CHECK(read(dir.path / "backward.index.json").find("\"gradient_of\"") != std::string::npos);
  CHECK(read(dir.path / "backward.cu").find("gradient of %") != std::string::npos);
}
