// Op interfaces of the llmc dialect.
#ifndef LLMC_INTERFACES_TD
#define LLMC_INTERFACES_TD

include "mlir/IR/OpBase.td"

def Llmc_DifferentiableOpInterface : OpInterface<"DifferentiableOpInterface"> {
  let cppNamespace = "::mlir::llmc";
  let description = [{
    An op that reverse-mode autodiff can differentiate. The autodiff pass
    walks the forward function backwards and, for each op, calls `buildVjp`
    with the gradients of the op's results (a null Value for a result that
    receives no gradient, e.g. the mean and rstd of layer_norm when nothing
    downstream reads them). The rule returns one gradient per operand, null
    where `isDifferentiableOperand` is false (token ids, for example).

    Every op that declares the interface implements `buildVjp` itself
    (ir/LlmcOps.td attaches it with `DeclareOpInterfaceMethods`), and the
    rules live in ir/LlmcVjp.cpp, next to the ops they differentiate: a rule
    is part of an op's definition, like its verifier, and the autodiff pass
    (passes/Autodiff.cpp) only orders the sweep, accumulates gradients at
    fan-out and seeds it. Rules build llmc ops only (forward ops and the
    backward ops such as `llmc.layer_norm_grad`), and may read the op's
    operands and results, which the backward sweep keeps alive. A rule
    returns failure, with a diagnostic on the op, for gradients it does not
    support (for example a gradient flowing into layer_norm's saved mean).
  }];
  let methods = [
    InterfaceMethod<[{
        Returns whether operand `index` carries a gradient: true for
        floating-point tensors, false for integer inputs.
      }], "bool", "isDifferentiableOperand", (ins "unsigned":$index), [{}],
      [{
        return ::llvm::isa<::mlir::FloatType>(::mlir::getElementTypeOrSelf(
            $_op->getOperand(index).getType()));
      }]>,
    InterfaceMethod<[{
        Builds the vector-Jacobian product at the builder's insertion point:
        given one gradient per result (null when none flows back), returns
        one gradient per operand (null for non-differentiable operands).
      }], "::mlir::FailureOr<::llvm::SmallVector<::mlir::Value>>", "buildVjp",
      (ins "::mlir::OpBuilder &":$builder, "::mlir::ValueRange":$resultGrads),
      [{}],
      [{
        // Only reached by an op that attaches the interface without a rule.
        return $_op->emitOpError("has no VJP rule"), ::mlir::failure();
      }]>
  ];
}

#endif // LLMC_INTERFACES_TD
