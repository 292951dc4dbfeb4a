// compileInference: the inference pipeline, then the lowering of @prefill
// and @decode.
#include "codegen/Inference.h"
#include "codegen/LlmcToKernel/LlmcToKernel.h"
#include "passes/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringSet.h"
#include "mlir/Pass/PassManager.h"

llvm::Expected<llmc::InferencePrograms>
llmc::compileInference(mlir::ModuleOp module, kir::DType weights) {
  mlir::PassManager pm(module.getContext());
  mlir::llmc::buildInferencePipeline(pm);
  if (mlir::failed(pm.run(module)))
    return llvm::createStringError("the inference pipeline failed (see the "
                                   "diagnostics above)");
  InferencePrograms programs;
  for (auto [name, program] :
       {std::pair<const char *, kir::Program *>{"prefill", &programs.prefill},
        {"decode", &programs.decode}}) {
    auto lowered = mlir::llmc::lowerFunction(module, name);
    if (!lowered)
      return lowered.takeError();
    if (!*lowered)
      return llvm::createStringError(llvm::Twine("the module has no @") +
                                     name + " (build it with "
                                            "buildInferenceModule)");
    *program = std::move(**lowered);
  }
  if (weights != kir::DType::F32)
    storeParametersAs(programs, weights);
  return programs;
}

int64_t llmc::storeParametersAs(InferencePrograms &programs,
                                kir::DType type) {
  // Parameter names some use in either program keeps f32.
  llvm::StringSet<> keep;
  for (const kir::Program *program : {&programs.prefill, &programs.decode}) {
    auto isParam = [&](int32_t buffer) {
      return program->buffers[buffer].kind == kir::BufferKind::Param;
    };
    for (const kir::Buffer &buffer : program->buffers)
      if (buffer.kind == kir::BufferKind::Param &&
          buffer.dtype != kir::DType::F32)
        keep.insert(buffer.name);
    for (const kir::Kernel &kernel : program->kernels)
      for (const kir::Instr &instr : kernel.body)
        if (instr.op == kir::Op::Store &&
            isParam(kernel.operands[instr.operand].buffer))
          keep.insert(program->buffers[kernel.operands[instr.operand].buffer]
                          .name);
    for (const kir::Step &step : program->steps) {
      if (step.kind == kir::StepKind::Kernel)
        continue;
      kir::forEachView(step, [&](llvm::StringRef label, const kir::View &view,
                                 kir::ViewRole role, const auto &) {
        if (view.buffer < 0 || !isParam(view.buffer))
          return;
        bool narrowable = step.kind == kir::StepKind::Gemm &&
                          label == "B" && role == kir::ViewRole::Read;
        if (!narrowable)
          keep.insert(program->buffers[view.buffer].name);
      });
    }
  }
  int64_t narrowed = 0;
  for (kir::Program *program : {&programs.prefill, &programs.decode}) {
    llvm::SmallVector<bool> narrow(program->buffers.size(), false);
    for (auto [index, buffer] : llvm::enumerate(program->buffers))
      if (buffer.kind == kir::BufferKind::Param &&
          !keep.contains(buffer.name)) {
        buffer.dtype = type;
        narrow[index] = true;
        if (program == &programs.prefill)
          ++narrowed;
      }
    for (kir::Kernel &kernel : program->kernels)
      for (kir::Access &access : kernel.operands)
        if (narrow[access.buffer])
          access.dtype = type;
    for (kir::Step &step : program->steps)
      if (step.kind == kir::StepKind::Gemm && narrow[step.gemm.b.buffer])
        step.gemm.sparseWeight = false;
  }
  return narrowed;
}
