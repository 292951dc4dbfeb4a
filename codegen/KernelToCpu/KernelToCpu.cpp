// The CPU emitter's driver: target, LLVM lowering, objects, printed phases.
//
// The kernel module itself is built by KernelEmitter (KernelEmitter.h and
// the files it names); this file takes it through the LLVM dialect and
// LLVM IR at O3 to an object for the host, on threads when asked.
//
// Changing what this file or the emitter's files emit (the pipelines, the
// function attributes) changes cached objects: bump kCpuCodegenVersion in
// runtime/Cpu/KernelCache.h with it.
#include "codegen/KernelToCpu/KernelToCpu.h"

// The seven conversions used, not mlir/Conversion/Passes.h (every
// conversion MLIR has, SPIR-V included).
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/VectorToLLVM/ConvertVectorToLLVMPass.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

#include <mutex>
#include <thread>

using namespace mlir;
namespace kir = llmc::kir;
using llmc::cpu::CpuTargetOptions;

//===----------------------------------------------------------------------===//
// Target
//===----------------------------------------------------------------------===//

CpuTargetOptions llmc::cpu::resolveTarget(const CpuTargetOptions &options) {
  CpuTargetOptions resolved = options;
  // The host's features go with the host's CPU only; an explicit CPU comes
  // with its own features (or the CPU's defaults).
  bool host = resolved.cpu.empty();
  if (host)
    resolved.cpu = llvm::sys::getHostCPUName().str();
  if (host && resolved.features.empty()) {
    // Sorted, so that the string (part of cache keys) is deterministic.
    llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
    std::vector<std::string> names;
    for (const auto &feature : features)
      names.push_back((feature.second ? "+" : "-") + feature.first().str());
    llvm::sort(names);
    resolved.features = llvm::join(names, ",");
  }
  if (resolved.vectorWidth <= 0) {
    auto has = [&](llvm::StringRef feature) {
      return llvm::is_contained(llvm::split(resolved.features, ','),
                                ("+" + feature).str());
    };
    resolved.vectorWidth = has("avx512f") ? 16 : has("avx") ? 8 : 4;
  }
  if (resolved.reductionUnroll < 1)
    resolved.reductionUnroll = 1;
  return resolved;
}

//===----------------------------------------------------------------------===//
// MLIR -> LLVM dialect -> LLVM IR -> object
//===----------------------------------------------------------------------===//

namespace {

/// Collects the diagnostics of a failed MLIR step into an llvm::Error.
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(MLIRContext *context)
      : handler(context, [this](Diagnostic &diag) {
          llvm::raw_string_ostream(messages) << diag << "\n";
          return success();
        }) {}
  llvm::Error error(llvm::StringRef what) const {
    return llvm::createStringError(what + ": " +
                                   (messages.empty() ? "unknown failure"
                                                     : messages));
  }

private:
  std::string messages;
  ScopedDiagnosticHandler handler;
};

void initializeNativeTarget() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

llvm::Expected<std::unique_ptr<llvm::TargetMachine>>
createTargetMachine(const CpuTargetOptions &target) {
  initializeNativeTarget();
  llvm::Triple triple(llvm::sys::getProcessTriple());
  std::string error;
  const llvm::Target *llvmTarget =
      llvm::TargetRegistry::lookupTarget(triple, error);
  if (!llvmTarget)
    return llvm::createStringError("no LLVM target for " + triple.str() +
                                   ": " + error);
  // PIC: JITLink places sections anywhere in the address space.
  std::unique_ptr<llvm::TargetMachine> machine(
      llvmTarget->createTargetMachine(triple, target.cpu, target.features,
                                      llvm::TargetOptions(),
                                      llvm::Reloc::PIC_, std::nullopt,
                                      llvm::CodeGenOptLevel::Aggressive));
  if (!machine)
    return llvm::createStringError("cannot create a target machine for " +
                                   target.cpu);
  return machine;
}

/// Translates an LLVM-dialect module and optimizes it at O3.
llvm::Expected<std::unique_ptr<llvm::Module>>
translateAndOptimize(ModuleOp module, llvm::LLVMContext &llvmContext,
                     llvm::TargetMachine &machine,
                     const CpuTargetOptions &target) {
  DialectRegistry registry;
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  module.getContext()->appendDialectRegistry(registry);
  DiagnosticCollector diagnostics(module.getContext());
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(module, llvmContext, "llmc-kernels");
  if (!llvmModule)
    return diagnostics.error("translation to LLVM IR failed");
  llvmModule->setTargetTriple(machine.getTargetTriple());
  llvmModule->setDataLayout(machine.createDataLayout());
  for (llvm::Function &function : *llvmModule) {
    if (function.isDeclaration())
      continue;
    function.addFnAttr("target-cpu", machine.getTargetCPU());
    function.addFnAttr("target-features", machine.getTargetFeatureString());
    function.addFnAttr(llvm::Attribute::NoUnwind);
    // Keep the column loops' vectors whole: x86 CPUs tuned to prefer 256-bit
    // vectors would otherwise split 512-bit ones.
    std::string bits = std::to_string(target.vectorWidth * 32);
    function.addFnAttr("min-legal-vector-width", bits);
    function.addFnAttr("prefer-vector-width", bits);
  }

  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder passBuilder(&machine);
  passBuilder.registerModuleAnalyses(mam);
  passBuilder.registerCGSCCAnalyses(cgam);
  passBuilder.registerFunctionAnalyses(fam);
  passBuilder.registerLoopAnalyses(lam);
  passBuilder.crossRegisterProxies(lam, fam, cgam, mam);
  passBuilder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3)
      .run(*llvmModule, mam);
  return llvmModule;
}

llvm::Error emitMachineCode(llvm::Module &module, llvm::TargetMachine &machine,
                            llvm::CodeGenFileType type,
                            llvm::raw_pwrite_stream &os) {
  llvm::legacy::PassManager passes;
  if (machine.addPassesToEmitFile(passes, os, nullptr, type))
    return llvm::createStringError("the target cannot emit this file type");
  passes.run(module);
  return llvm::Error::success();
}

bool isApproximated(llvm::StringRef opName) {
  return llvm::is_contained(
      {math::ExpOp::getOperationName(), math::LogOp::getOperationName(),
       math::TanhOp::getOperationName(), math::ErfOp::getOperationName()},
      opName);
}

} // namespace

llvm::Error llmc::cpu::lowerToLlvmDialect(ModuleOp module) {
  MLIRContext *context = module.getContext();
  DiagnosticCollector diagnostics(context);
  // Transcendentals become inline polynomials over arith ops, so they work
  // on vectors and need no math library at run time. bf16 conversions
  // become integer ops (round to nearest even), as few CPUs have them.
  RewritePatternSet patterns(context);
  populateMathPolynomialApproximationPatterns(patterns, isApproximated);
  arith::populateExpandBFloat16Patterns(patterns);
  if (failed(applyPatternsGreedily(module, std::move(patterns))))
    return diagnostics.error("math approximation did not converge");

  PassManager passes(context);
  passes.addPass(createSCFToControlFlowPass());
  passes.addPass(createConvertVectorToLLVMPass());
  passes.addPass(createConvertMathToLLVMPass());
  passes.addPass(createArithToLLVMConversionPass());
  passes.addPass(createConvertControlFlowToLLVMPass());
  passes.addPass(createConvertFuncToLLVMPass());
  passes.addPass(createReconcileUnrealizedCastsPass());
  if (failed(passes.run(module)))
    return diagnostics.error("lowering the CPU kernels to LLVM failed");
  return llvm::Error::success();
}

llvm::Expected<std::string>
llmc::cpu::lowerToLlvmIr(ModuleOp module, const CpuTargetOptions &options) {
  CpuTargetOptions target = resolveTarget(options);
  auto machine = createTargetMachine(target);
  if (!machine)
    return machine.takeError();
  llvm::LLVMContext llvmContext;
  auto llvmModule =
      translateAndOptimize(module, llvmContext, **machine, target);
  if (!llvmModule)
    return llvmModule.takeError();
  std::string text;
  llvm::raw_string_ostream os(text);
  (*llvmModule)->print(os, nullptr);
  return text;
}

namespace {

llvm::Error verifyKernels(llvm::ArrayRef<kir::Kernel> kernels) {
  for (const kir::Kernel &kernel : kernels) {
    std::string problem = kir::verifyKernel(kernel);
    if (!problem.empty())
      return llvm::createStringError("invalid kernel: " + problem);
  }
  return llvm::Error::success();
}

/// Builds and lowers the kernels to an LLVM-dialect module in `context`.
llvm::Expected<OwningOpRef<ModuleOp>>
buildLlvmDialectModule(MLIRContext &context,
                       llvm::ArrayRef<kir::Kernel> kernels,
                       const CpuTargetOptions &target) {
  if (llvm::Error error = verifyKernels(kernels))
    return error;
  OwningOpRef<ModuleOp> module =
      llmc::cpu::buildCpuKernelModule(context, kernels, target);
  if (llvm::Error error = llmc::cpu::lowerToLlvmDialect(*module))
    return error;
  return module;
}

} // namespace

llvm::Expected<llvm::SmallVector<char, 0>>
llmc::cpu::compileKernelsToObject(llvm::ArrayRef<kir::Kernel> kernels,
                                  const CpuTargetOptions &options) {
  CpuTargetOptions target = resolveTarget(options);
  MLIRContext context(MLIRContext::Threading::DISABLED);
  auto module = buildLlvmDialectModule(context, kernels, target);
  if (!module)
    return module.takeError();
  auto machine = createTargetMachine(target);
  if (!machine)
    return machine.takeError();
  llvm::LLVMContext llvmContext;
  auto llvmModule =
      translateAndOptimize(**module, llvmContext, **machine, target);
  if (!llvmModule)
    return llvmModule.takeError();
  llvm::SmallVector<char, 0> object;
  llvm::raw_svector_ostream os(object);
  if (llvm::Error error = emitMachineCode(**llvmModule, **machine,
                                          llvm::CodeGenFileType::ObjectFile,
                                          os))
    return error;
  return object;
}

llvm::Expected<std::vector<llvm::SmallVector<char, 0>>>
llmc::cpu::compileKernelsToObjects(llvm::ArrayRef<kir::Kernel> kernels,
                                   int parts,
                                   const CpuTargetOptions &options) {
  // Runs of consecutive kernels with about equal instruction counts (what
  // the compile time follows): run r ends where the running count passes
  // r/parts of the total.
  int64_t total = 0;
  for (const kir::Kernel &kernel : kernels)
    total += int64_t(kernel.body.size()) + 1;
  parts = std::max(1, std::min<int>(parts, int(kernels.size())));
  std::vector<std::pair<size_t, size_t>> runs;
  size_t begin = 0;
  int64_t seen = 0;
  for (size_t i = 0; i < kernels.size(); ++i) {
    seen += int64_t(kernels[i].body.size()) + 1;
    int64_t goal = total * int64_t(runs.size() + 1) / parts;
    if (seen >= goal && int(runs.size()) + 1 < parts) {
      runs.push_back({begin, i + 1});
      begin = i + 1;
    }
  }
  if (begin < kernels.size() || runs.empty())
    runs.push_back({begin, kernels.size()});
  // The target is resolved once, before the threads (host queries).
  CpuTargetOptions target = resolveTarget(options);
  initializeNativeTarget();
  std::vector<llvm::Expected<llvm::SmallVector<char, 0>>> results;
  for (size_t r = 0; r < runs.size(); ++r)
    results.emplace_back(llvm::SmallVector<char, 0>());
  auto compileRun = [&](size_t r) {
    results[r] = compileKernelsToObject(
        kernels.slice(runs[r].first, runs[r].second - runs[r].first), target);
  };
  std::vector<std::thread> threads;
  for (size_t r = 1; r < runs.size(); ++r)
    threads.emplace_back(compileRun, r);
  compileRun(0);
  for (std::thread &thread : threads)
    thread.join();
  std::vector<llvm::SmallVector<char, 0>> objects;
  llvm::Error errors = llvm::Error::success();
  for (auto &result : results) {
    if (!result) {
      errors = llvm::joinErrors(std::move(errors), result.takeError());
      continue;
    }
    objects.push_back(std::move(*result));
  }
  if (errors)
    return errors;
  return objects;
}

llvm::ArrayRef<llvm::StringRef> llmc::cpu::cpuPhaseNames() {
  static const llvm::StringRef names[] = {"cpu-mlir", "cpu-llvm-dialect",
                                          "cpu-llvm-ir", "cpu-asm"};
  return names;
}

llvm::Error llmc::cpu::printCpuPhase(llvm::raw_ostream &os,
                                     llvm::ArrayRef<kir::Kernel> kernels,
                                     llvm::StringRef phase,
                                     const CpuTargetOptions &options) {
  if (!llvm::is_contained(cpuPhaseNames(), phase))
    return llvm::createStringError(
        "unknown CPU phase '" + phase + "'; expected one of " +
        llvm::join(cpuPhaseNames(), ", "));
  CpuTargetOptions target = resolveTarget(options);
  MLIRContext context(MLIRContext::Threading::DISABLED);
  if (phase == "cpu-mlir") {
    if (llvm::Error error = verifyKernels(kernels))
      return error;
    buildCpuKernelModule(context, kernels, target)->print(os);
    return llvm::Error::success();
  }
  auto module = buildLlvmDialectModule(context, kernels, target);
  if (!module)
    return module.takeError();
  if (phase == "cpu-llvm-dialect") {
    (*module)->print(os);
    return llvm::Error::success();
  }
  auto machine = createTargetMachine(target);
  if (!machine)
    return machine.takeError();
  llvm::LLVMContext llvmContext;
  auto llvmModule =
      translateAndOptimize(**module, llvmContext, **machine, target);
  if (!llvmModule)
    return llvmModule.takeError();
  if (phase == "cpu-llvm-ir") {
    (*llvmModule)->print(os, nullptr);
    return llvm::Error::success();
  }
  llvm::SmallString<0> assembly;
  llvm::raw_svector_ostream assemblyStream(assembly);
  if (llvm::Error error =
          emitMachineCode(**llvmModule, **machine,
                          llvm::CodeGenFileType::AssemblyFile, assemblyStream))
    return error;
  os << assembly;
  return llvm::Error::success();
}
