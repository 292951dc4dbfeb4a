// The llmc dialect definition and the type constraints its ops share.
#ifndef LLMC_BASE_TD
#define LLMC_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Llmc_Dialect : Dialect {
  let name = "llmc";
  let cppNamespace = "::mlir::llmc";
  let summary = "Tensor ops of transformer language models and their training step";
  let description = [{
    The llmc dialect describes a model's forward pass and, after the graph
    passes, its whole training step, on statically shaped tensors. Ops are
    coarse (layer_norm, attention, cross_entropy) so that the backward pass
    can reuse the statistics the forward saved, and so that fusion and code
    generation see the structure a hand-written trainer such as llm.c has.
    Element types are f32, f16 and bf16 for data and i32/i64 for token ids;
    no op converts element types implicitly (`llmc.cast` does).
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasConstantMaterializer = 1;
  // Inherent attributes stay in the attribute dictionary: the generated
  // parsers infer result types before the dictionary is turned into
  // properties, so with properties the inference would not see `epsilon`,
  // `permutation` or the transpose flags.
  let usePropertiesForAttributes = 0;
}

class Llmc_Op<string mnemonic, list<Trait> traits = []>
    : Op<Llmc_Dialect, mnemonic, traits>;

// Every llmc value has a static shape: the memory plan of a step is computed
// at compile time.
def Llmc_FloatTensor : StaticShapeTensorOf<[F32, F16, BF16]>;
def Llmc_IndexTensor : StaticShapeTensorOf<[I32, I64]>;
def Llmc_F32Tensor : StaticShapeTensorOf<[F32]>;
def Llmc_Scalar : 0DTensorOf<[F32]>;
def Llmc_AnyTensor : StaticShapeTensorOf<[F32, F16, BF16, I32, I64]>;

def Llmc_GeluApproximation : I32EnumAttr<"GeluApproximation",
    "how GELU evaluates the Gaussian CDF", [
      I32EnumAttrCase<"None", 0, "none">,
      I32EnumAttrCase<"Tanh", 1, "tanh">
    ]> {
  let cppNamespace = "::mlir::llmc";
  let genSpecializedAttr = 0;
}
def Llmc_GeluApproximationAttr : EnumAttr<Llmc_Dialect, Llmc_GeluApproximation,
                                          "gelu_approximation"> {
  let assemblyFormat = "$value";
}

// How code generation runs an llmc.fusion (see Llmc_FusionOp).
def Llmc_FusionKind : I32EnumAttr<"FusionKind",
    "how code generation runs a fusion", [
      I32EnumAttrCase<"Pointwise", 0, "pointwise">,
      I32EnumAttrCase<"Row", 1, "row">,
      I32EnumAttrCase<"Gemm", 2, "gemm">
    ]> {
  let cppNamespace = "::mlir::llmc";
  let genSpecializedAttr = 0;
}
def Llmc_FusionKindAttr : EnumAttr<Llmc_Dialect, Llmc_FusionKind,
                                   "fusion_kind"> {
  let assemblyFormat = "$value";
}

// How llmc.all_reduce and llmc.reduce_scatter combine the ranks' tensors.
def Llmc_CollectiveReduction : I32EnumAttr<"CollectiveReduction",
    "how a collective combines the ranks' tensors", [
      I32EnumAttrCase<"Sum", 0, "sum">,
      I32EnumAttrCase<"Avg", 1, "avg">,
      I32EnumAttrCase<"Max", 2, "max">
    ]> {
  let cppNamespace = "::mlir::llmc";
  let genSpecializedAttr = 0;
}
def Llmc_CollectiveReductionAttr : EnumAttr<Llmc_Dialect,
                                            Llmc_CollectiveReduction,
                                            "collective_reduction"> {
  let assemblyFormat = "$value";
}

#endif // LLMC_BASE_TD
