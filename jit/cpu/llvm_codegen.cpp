#include "jit/cpu/llvm_codegen.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <llvm/ADT/SmallVector.h>
#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/PassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/AsmParser/Parser.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/Transforms/Utils/SplitModule.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include "jit/cpu/cpu_isa.h"

namespace towerjit::cpujit {
namespace {

// The LLVM CPU name for a level below this CPU's widest: the generic x86-64 levels, so an
// AVX-512 machine compiles the kernels an AVX2-only or SSE2-only machine would.
const char* generic_cpu(CpuIsa level) { return level == CpuIsa::avx2 ? "x86-64-v3" : "x86-64"; }

// Whether the kernels are compiled for a generic CPU below this one's vector level.
bool capped() { return vector_level(cpu_isa()) < vector_level(widest_isa()); }

// The machine as JITTargetMachineBuilder sees it (real CPU name and features, not a generic
// x86-64) or, where TOWERJIT_CPU_ISA caps it below, the generic CPU of that level; with the
// settings kCodegenFlags names. LLJIT links these objects with the host's own builder, which
// is fine: only the code inside the objects depends on the target.
llvm::Expected<llvm::orc::JITTargetMachineBuilder> target_builder() {
  auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!jtmb) return jtmb.takeError();
  if (capped()) {
    jtmb = llvm::orc::JITTargetMachineBuilder(jtmb->getTargetTriple());
    jtmb->setCPU(generic_cpu(cpu_isa()));
  }
  jtmb->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  // PIC + small code model: JITLink reaches externals (libm, OpenBLAS) through GOT/PLT
  // stubs it builds, so they may live anywhere in the address space.
  jtmb->setRelocationModel(llvm::Reloc::PIC_);
  jtmb->setCodeModel(llvm::CodeModel::Small);
  return jtmb;
}

// O3 with the loop and SLP vectorisers on: PipelineTuningOptions leaves them off by
// default (clang turns them on from -O2), and the emitter relies on them for scalar loops.
void optimise(llvm::Module& module, llvm::TargetMachine& tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = true;
  pto.SLPVectorization = true;
  pto.LoopUnrolling = true;
  llvm::PassBuilder pb(&tm, pto);  // with a TargetMachine: real TTI costs for AVX2/FMA
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  mpm.run(module, mam);
}

std::string to_string(llvm::Error error) { return llvm::toString(std::move(error)); }

}  // namespace

void initialize_native_target() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
  });
}

std::string target_description() {
  const std::string triple = llvm::sys::getProcessTriple();
  if (capped()) return triple + ";cpu=" + generic_cpu(cpu_isa()) + ";features=";
  // Sorted so the description (and so the cache key) does not depend on hash-map order.
  std::vector<std::string> features;
  for (const auto& feature : llvm::sys::getHostCPUFeatures()) {
    std::string entry(1, feature.second ? '+' : '-');
    entry += feature.first();
    features.push_back(std::move(entry));
  }
  std::sort(features.begin(), features.end());
  std::string out = triple + ";cpu=" + llvm::sys::getHostCPUName().str() + ";features=";
  for (std::size_t i = 0; i < features.size(); ++i) out += (i ? "," : "") + features[i];
  return out;
}

std::string llvm_version() { return LLVM_VERSION_STRING; }

namespace {

// A module's parse and verification; the error in words, or null.
std::unique_ptr<llvm::Module> parse(llvm::MemoryBufferRef text, llvm::LLVMContext& context, std::string& error) {
  llvm::SMDiagnostic diagnostic;
  std::unique_ptr<llvm::Module> module = llvm::parseAssembly(text, diagnostic, context);
  if (!module) {
    llvm::raw_string_ostream os(error);
    diagnostic.print(nullptr, os, /*ShowColors=*/false);
    error = "parse: " + error;
    return nullptr;
  }
  std::string verify_message;
  llvm::raw_string_ostream verify_os(verify_message);
  if (llvm::verifyModule(*module, &verify_os)) {
    error = "verify: " + verify_os.str();
    return nullptr;
  }
  return module;
}

// Optimises `module` and emits it as one object file.
ObjectCode optimise_and_emit(llvm::Module& module) {
  auto jtmb = target_builder();
  if (!jtmb) return {{}, "target: " + to_string(jtmb.takeError())};
  auto tm = jtmb->createTargetMachine();
  if (!tm) return {{}, "target: " + to_string(tm.takeError())};
  module.setTargetTriple((*tm)->getTargetTriple().str());
  module.setDataLayout((*tm)->createDataLayout());
  optimise(module, **tm);
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream out(buffer);
  llvm::legacy::PassManager codegen;  // code generation still runs on the legacy manager
  if ((*tm)->addPassesToEmitFile(codegen, out, nullptr, llvm::CodeGenFileType::ObjectFile))
    return {{}, "codegen: the target cannot emit object files"};
  codegen.run(module);
  return {{std::string(buffer.begin(), buffer.end())}, {}};
}

}  // namespace

ObjectCode compile_ir_to_objects(const std::string& ll_text, const std::string& module_name, int threads) {
  initialize_native_target();
  llvm::LLVMContext context;
  std::string error;
  // Named like the dumped file, so "<module>.ll:47:22" in the message points into it.
  std::unique_ptr<llvm::Module> module = parse(llvm::MemoryBufferRef(ll_text, module_name + ".ll"), context, error);
  if (!module) return {{}, error};
  int functions = 0;
  for (const llvm::Function& f : *module) functions += !f.isDeclaration();
  const int parts = std::clamp(std::min(threads, functions / 4), 1, 16);  // a few kernels per part at least
  if (parts == 1) return optimise_and_emit(*module);
  // Each part leaves its context as bitcode and is read back into a context of its own, the
  // unit LLVM lets one thread work in.
  std::vector<std::string> bitcode;
  llvm::SplitModule(*module, parts, [&](std::unique_ptr<llvm::Module> part) {
    std::string bytes;
    llvm::raw_string_ostream os(bytes);
    llvm::WriteBitcodeToFile(*part, os);
    os.flush();
    bitcode.push_back(std::move(bytes));
  });
  std::vector<ObjectCode> done(bitcode.size());
  std::vector<std::thread> workers;
  for (size_t i = 0; i < bitcode.size(); ++i)
    workers.emplace_back([&, i] {
      llvm::LLVMContext own;
      auto part = llvm::parseBitcodeFile(llvm::MemoryBufferRef(bitcode[i], module_name), own);
      if (!part) {
        done[i].error = "split: " + to_string(part.takeError());
        return;
      }
      done[i] = optimise_and_emit(**part);
    });
  for (std::thread& w : workers) w.join();
  ObjectCode all;
  for (ObjectCode& d : done) {
    if (!d.error.empty()) return {{}, d.error};
    all.objects.push_back(std::move(d.objects.front()));
  }
  return all;
}

}  // namespace towerjit::cpujit
