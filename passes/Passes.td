// Graph passes over the llmc dialect. Each is runnable alone from llmc-opt.
#ifndef LLMC_PASSES_TD
#define LLMC_PASSES_TD

include "mlir/Pass/PassBase.td"

def VerifyLegalityPass : Pass<"llmc-verify-legality", "mlir::ModuleOp"> {
  let summary = "Checks that a module is a model the llmc pipeline accepts";
  let description = [{
    The contract every later pass relies on, checked once at the start:
    the module holds `func.func @forward(params..., tokens, targets) -> loss`
    where the parameters are f32, f16 or bf16 tensors, `tokens` and
    `targets` are i32 or i64 tensors of one shape (the types the llmc ops
    accept), the result is one `tensor<f32>`, and the body is a single block
    of llmc ops ending in `func.return`. Parameter
    names (`llmc.param` argument attributes), when given, are unique, and so
    are the `stream` ids of dropout sites. The pass changes nothing.
  }];
}

#endif // LLMC_PASSES_TD
