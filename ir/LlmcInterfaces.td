// Op interfaces and op categories (traits) of the llmc dialect.
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

//===----------------------------------------------------------------------===//
// Op categories: what kind an op is, written once on the op (ir/LlmcOps.td)
// and read by the passes (fusion, remat, AMP) and the planner. The C++
// trait classes are in ir/LlmcOps.h; ir/LlmcOps.h also has the predicates
// (isRowReduction, getAmpCategory, ...) that combine them.
//===----------------------------------------------------------------------===//

class Llmc_OpTrait<string name> : NativeOpTrait<name> {
  let cppNamespace = "::mlir::OpTrait::llmc";
}

// Computes each element of its (first) result from the elements of its
// operands at that index (broadcast operands included), plus operands it
// gathers from (the embedding table, the rotary partner), which fusion
// keeps as kernel inputs. llmc-fusion fuses these into pointwise, row and
// GEMM-epilogue groups.
def Llmc_Pointwise : Llmc_OpTrait<"Pointwise">;

// A backward op that works on whole rows (softmax_grad, layer_norm_grad):
// a row reduction whose iteration domain is its result, not its input.
def Llmc_RowGradient : Llmc_OpTrait<"RowGradient">;

// Recomputing it costs about one pass over its operands (no matmul-like
// FLOPs): selective remat recomputes it rather than storing its result.
def Llmc_CheapToRecompute : Llmc_OpTrait<"CheapToRecompute">;

// A view of its first operand (reshape, transpose, slice, broadcast): the
// same buffer, so remat stores it with its source.
def Llmc_View : Llmc_OpTrait<"View">;

// Lives in no buffer (fills, constants): kernels read it as a constant.
def Llmc_NoBuffer : Llmc_OpTrait<"NoBuffer">;

// AMP categories (passes/Amp.cpp), after torch.autocast's CUDA lists and
// Apex AMP's function lists. allow: computes in the low-precision type (the
// matrix products); deny: computes in f32 (range or accumulated rounding
// fp16 does not survive); an op with neither follows its inputs. Exempt ops
// take no category and no list (casts, constants, fills, fusions).
def Llmc_AmpAllow : Llmc_OpTrait<"AmpAllow">;
def Llmc_AmpDeny : Llmc_OpTrait<"AmpDeny">;
def Llmc_AmpExempt : Llmc_OpTrait<"AmpExempt">;

def Llmc_RowReduction : OpInterface<"RowReductionOpInterface"> {
  let cppNamespace = "::mlir::llmc";
  let description = [{
    An op whose kernel reduces along the last dimension (layer_norm,
    rms_norm, softmax, cross_entropy, their backward ops, a reduce over the
    last dimension): the root of a row group of llmc-fusion. Reductions over
    more dims than the last reduce rows in the kernel and the rest in a
    second stage; reductions not over the last dimension are not row ops.
  }];
  let methods = [
    InterfaceMethod<[{
        Returns whether this op reduces along its operand's last dimension.
      }], "bool", "reducesRows", (ins), [{}], [{ return true; }]>
  ];
}

#endif // LLMC_INTERFACES_TD
