// Shared state of the lowering of a fused llmc function to a kir::Program
// (private to codegen/LlmcToKernel): strided tensor views, the kernel
// builder, and the Lowering class whose members live in one file per job
// (see LlmcToKernel.cpp for the overview and the list of files).
#ifndef LLMC_CODEGEN_LLMCTOKERNEL_LOWERINGSTATE_H
#define LLMC_CODEGEN_LLMCTOKERNEL_LOWERINGSTATE_H

#include "ir/kernel/Program.h"
#include "ir/LlmcOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"

#include <map>
#include <optional>
#include <string>

namespace mlir::llmc::lowering {

using ::llmc::kir::Access;
using ::llmc::kir::AttentionStep;
using ::llmc::kir::Buffer;
using ::llmc::kir::BufferKind;
using ::llmc::kir::DType;
using ::llmc::kir::GemmStep;
using ::llmc::kir::Instr;
using ::llmc::kir::Kernel;
using ::llmc::kir::Program;
using ::llmc::kir::Step;
using ::llmc::kir::StepKind;
using ::llmc::kir::View;
using KOp = ::llmc::kir::Op;

/// A strided view of a buffer: element (i0, ..., in-1) is element
/// offset + sum strides[d] * i_d of `buffer`.
struct TensorView {
  int32_t buffer = -1;
  int64_t offset = 0;
  SmallVector<int64_t> shape;
  SmallVector<int64_t> strides;
  DType dtype = DType::F32;
};

SmallVector<int64_t> contiguousStrides(ArrayRef<int64_t> shape);

/// The dimension map of a value over a domain of its own shape: dim d
/// runs along domain dim d.
SmallVector<int> identityMap(int64_t rank);
int64_t product(ArrayRef<int64_t> values);
/// The kernel IR element type of a ranked tensor type, if it has one.
FailureOr<DType> dtypeOf(Type type);

/// Strides for `newShape` that view the same elements as `view`, if they
/// exist (each run of old dimensions merged or split must be contiguous
/// within itself), else nothing.
std::optional<SmallVector<int64_t>> reshapeStrides(const TensorView &view,
                                                   ArrayRef<int64_t> newShape);


/// Builds one kernel: the instruction list, with loads of kernel inputs
/// shared between uses that read them with the same dimension map.
class KernelBuilder {
public:
  KernelBuilder(std::string name, std::string origin,
                ArrayRef<int64_t> domain) {
    kernel.name = std::move(name);
    kernel.origin = std::move(origin);
    kernel.domain.assign(domain.begin(), domain.end());
  }

  int32_t emit(KOp op, DType type, std::vector<int32_t> args = {},
               int32_t operand = -1, int32_t dim = -1, double imm = 0.0) {
    Instr instr;
    instr.op = op;
    instr.type = type;
    instr.args = std::move(args);
    instr.operand = operand;
    instr.dim = dim;
    instr.imm = imm;
    kernel.body.push_back(std::move(instr));
    return kernel.body.size() - 1;
  }
  int32_t constant(double value) {
    auto [it, inserted] = constants.try_emplace(value, -1);
    if (inserted)
      it->second = emit(KOp::Const, DType::F32, {}, -1, -1, value);
    return it->second;
  }
  int32_t intConstant(int64_t value) {
    return emit(KOp::Const, DType::I64, {}, -1, -1, double(value));
  }
  int32_t unary(KOp op, int32_t a) { return emit(op, DType::F32, {a}); }
  int32_t binary(KOp op, int32_t a, int32_t b) {
    return emit(op, kernel.body[a].type, {a, b});
  }

  /// The operand index of an access of `view` where view dimension i runs
  /// along domain dimension dimMap[i] (-1: not at all, i.e. size 1).
  int32_t operand(const TensorView &view, ArrayRef<int> dimMap,
                  int overrideDim = -1, int64_t overrideStride = 0) {
    Access access = accessOf(view, dimMap);
    if (overrideDim >= 0)
      access.strides[overrideDim] = overrideStride;
    for (auto [index, existing] : llvm::enumerate(kernel.operands))
      if (existing.buffer == access.buffer &&
          existing.dtype == access.dtype &&
          existing.offset == access.offset &&
          existing.strides == access.strides)
        return index;
    kernel.operands.push_back(std::move(access));
    return kernel.operands.size() - 1;
  }
  /// The access `operand` makes for `view` and `dimMap`, without adding it.
  Access accessOf(const TensorView &view, ArrayRef<int> dimMap) const {
    Access access;
    access.buffer = view.buffer;
    access.dtype = view.dtype;
    access.offset = view.offset;
    access.strides.assign(kernel.domain.size(), 0);
    // A size-1 dimension broadcast over a longer domain dimension reads
    // one element (stride 0); over a domain dimension of extent 1 it keeps
    // its stride, so a row of length 1 still reads per column.
    for (auto [i, d] : llvm::enumerate(dimMap))
      if (d >= 0 && (view.shape[i] != 1 || kernel.domain[d] == 1))
        access.strides[d] += view.strides[i];
    return access;
  }
  int32_t load(const TensorView &view, ArrayRef<int> dimMap) {
    int32_t index = operand(view, dimMap);
    auto [it, inserted] = loads.try_emplace(index, -1);
    if (inserted)
      it->second = emit(KOp::Load, ::llmc::kir::computeType(view.dtype), {}, index);
    return it->second;
  }
  void store(const TensorView &view, ArrayRef<int> dimMap, int32_t value) {
    emit(KOp::Store, DType::F32, {value}, operand(view, dimMap));
  }
  int32_t index(int dim) { return emit(KOp::Index, DType::I64, {}, -1, dim); }
  bool hasStores() const {
    return llvm::any_of(kernel.body, [](const Instr &instr) {
      return instr.op == KOp::Store;
    });
  }

  Kernel kernel;

private:
  std::map<double, int32_t> constants;
  DenseMap<int32_t, int32_t> loads;
};

/// The scalar expansion of one op (Expand.cpp).
struct ExpandFrame;

class Lowering {
public:
  explicit Lowering(func::FuncOp func) : func(func) {}

  FailureOr<Program> run();

private:
  // Values and buffers.
  int32_t newBuffer(StringRef name, BufferKind kind, DType dtype,
                    ArrayRef<int64_t> shape) {
    Buffer buffer;
    buffer.name = name.str();
    buffer.kind = kind;
    buffer.dtype = dtype;
    buffer.shape.assign(shape.begin(), shape.end());
    program.buffers.push_back(std::move(buffer));
    return program.buffers.size() - 1;
  }
  FailureOr<TensorView> newTensor(Value value, StringRef name) {
    auto type = cast<RankedTensorType>(value.getType());
    FailureOr<DType> dtype = dtypeOf(type);
    if (failed(dtype))
      return failure();
    TensorView view;
    view.buffer = newBuffer(name, BufferKind::Arena, *dtype, type.getShape());
    view.shape.assign(type.getShape().begin(), type.getShape().end());
    view.strides = contiguousStrides(view.shape);
    view.dtype = *dtype;
    return view;
  }
  std::string nameOf(Value value);
  std::string kernelName(StringRef what) {
    std::string name = "k" + std::to_string(program.kernels.size()) + "_" +
                       what.str();
    for (char &c : name)
      if (!llvm::isAlnum(c))
        c = '_';
    return name;
  }
  void addKernelStep(Kernel kernel, StringRef origin) {
    program.kernels.push_back(std::move(kernel));
    Step step;
    step.kind = StepKind::Kernel;
    step.kernel = program.kernels.size() - 1;
    step.origin = origin.str();
    appendStep(std::move(step));
  }
  /// Appends `step` to the schedule (its kernels already in the program),
  /// first completing every collective in flight whose input or output it
  /// touches: a collective's wait comes as late as the data allows, so the
  /// steps between overlap the communication.
  void appendStep(Step step);
  /// Appends the waits of the collectives still in flight.
  void completeCollectives();

  /// The view of a value, materializing splat constants and fills (which
  /// kernels otherwise read as constants) on first use.
  FailureOr<TensorView> viewOf(Value value);
  /// A contiguous copy of `view` (a copy kernel), for consumers that need
  /// one; converted to `dtype` when given (widened exactly, or rounded to
  /// nearest even).
  TensorView copyContiguous(const TensorView &view, StringRef name,
                            std::optional<DType> dtype = std::nullopt);

  LogicalResult lowerView(Operation *op);
  void roundNarrowResults(KernelBuilder &kb, Operation *op);
  LogicalResult lowerGemm(Operation *matmul, Operation *fusion,
                          ArrayRef<Operation *> epilogue);
  /// The epilogue kernel of a gemm fusion, run on C (`c`) after the GEMM:
  /// the product loaded from C (rounded to `roundTo` when C is f32 for a
  /// narrow product), the epilogue expanded, each result stored into C in
  /// place or into a buffer of its own. Returns the kernel's index.
  FailureOr<int32_t> lowerGemmEpilogue(FusionOp fusion, Operation *matmul,
                                       ArrayRef<Operation *> epilogue,
                                       const TensorView &c,
                                       std::optional<DType> roundTo);
  LogicalResult lowerAttention(AttentionOp op);
  /// cache_write as a scatter kernel storing into the cache's state buffer.
  LogicalResult lowerCacheWrite(CacheWriteOp op);
  LogicalResult lowerAttentionGrad(AttentionGradOp op);
  LogicalResult lowerEmbeddingGrad(EmbeddingGradOp op);
  /// all_reduce, reduce_scatter, all_gather, broadcast_from: a
  /// CollectiveStart now, its wait placed by appendStep.
  LogicalResult lowerCollective(Operation *op);
  /// llmc.pipeline_send / pipeline_recv: a Send or Recv collective step.
  LogicalResult lowerPipelineTransfer(Operation *op);
  /// Appends the start of `c` (input and fields set), its output a new
  /// buffer for `result`; the wait comes before the first step touching it.
  LogicalResult startCollective(::llmc::kir::CollectiveStep c, Value result);
  /// The weight (result 1) and bias (result 2) gradients of a layer_norm_grad
  /// or rms_norm_grad: sums over the leading dims, one kernel over
  /// [C, rows] whose row walks down a column. `wanted`: result number and
  /// the value it becomes.
  LogicalResult lowerNormParamGrads(Operation *op,
                                    ArrayRef<std::pair<unsigned, Value>> wanted);
  /// Reduces `dims` of `input` (sum, max, or mean), returning a contiguous
  /// view with those dims as size 1, of type `resultType` (stages between
  /// are f32): one kernel when the dims can be walked as one strided run
  /// and that leaves enough rows to split across threads, else in stages
  /// (innermost reduced dim first).
  FailureOr<TensorView> reduceDims(const TensorView &input,
                                   ArrayRef<int64_t> dims, KOp reduce,
                                   bool mean, StringRef name,
                                   DType resultType = DType::F32);
  /// `view` restrided to `shape` (a reshape), copied first if strides
  /// cannot express it.
  TensorView reshaped(TensorView view, ArrayRef<int64_t> shape,
                      StringRef name);
  /// Stores attention-like outputs ([B, H, T, D]) in the order of the
  /// transpose that follows them, so that it and a merging reshape are free.
  void orderLikeTransposeUser(Value result, TensorView &view);
  /// The view of the `rng` input, element `index` (0: seed, 1: step),
  /// creating the input on first use.
  TensorView rngElement(int64_t index);
  /// The buffer an `llmc.updates` result can be stored into by the kernel
  /// of `anchor` (see the file comment), or nothing.
  std::optional<TensorView> inPlaceTarget(Value result, Operation *anchor);
  /// Whether the kernel being built reads `buffer` only through `access`,
  /// without index overrides.
  static bool readsOnlyAt(const Kernel &kernel, const Access &access);
  /// Plans `result` (an `llmc.updates` of `target`) as accumulated into
  /// target's buffer by the steps that compute its terms, when it is
  /// target + p1 (+ p2 ...) in one of these forms:
  ///   llmc.add(X, p)  or a pointwise fusion of that one add,
  ///     p a matmul, batch_matmul or embedding_grad used only there, or
  ///     p = llmc.cast(q) to X's type, q a matmul or batch_matmul of
  ///     f16/bf16 operands used only by the cast (q's f32 sums go into X
  ///     unrounded);
  ///   a gemm fusion whose epilogue only adds X and such terms (grad.wte
  ///     of tied embeddings: the logits' dW + the embedding gradient);
  /// and nothing but that add reads X from the first of those steps on
  /// (inPlaceTarget's rule). The product must have X's type: a weight
  /// gradient summed over a batch by a reduction after the GEMM is not
  /// matched (the lowering sees dW = dY^T X as one GEMM over B*T rows).
  void planAccumulation(Value result, BlockArgument target);
  /// The view of the argument `op` accumulates into, if planned.
  std::optional<TensorView> accumulationTarget(Operation *op) {
    auto it = accumulateInto.find(op);
    if (it == accumulateInto.end())
      return std::nullopt;
    return views.lookup(it->second);
  }
  LogicalResult lowerGroup(Operation *anchor, StringRef name,
                           ArrayRef<Operation *> ops, ValueRange inputs,
                           ValueRange outerInputs, ValueRange results,
                           ValueRange outerResults);
  LogicalResult lowerCrossEntropy(CrossEntropyOp op, Value outerLogits,
                                  Value outerTargets, Value outerLoss,
                                  Value outerLse);
  /// cross_entropy_combine: lse and the mean loss from whole-row
  /// statistics, one kernel over the positions.
  LogicalResult lowerCrossEntropyCombine(CrossEntropyCombineOp op);
  LogicalResult lowerReduce(Operation *op);
  LogicalResult lowerConcat(ConcatOp op);
  LogicalResult lowerOp(Operation *op);
  /// Outputs (named by `llmc.output`, else loss, logits, resultN) and the
  /// copies of `llmc.updates` results not stored in place.
  LogicalResult lowerResults(func::ReturnOp ret);
  /// Copies the module's AdamW betas (kAdamBetasAttr) into a program that
  /// takes bias corrections.
  LogicalResult recordAdamBetas();

  /// Scalar expansion of one op inside a kernel: dispatches to one helper
  /// per op category (each returns nothing for an op not of its category).
  LogicalResult expand(KernelBuilder &kb, Operation *op);
  std::optional<LogicalResult> expandArithmetic(ExpandFrame &f);
  std::optional<LogicalResult> expandActivation(ExpandFrame &f);
  LogicalResult expandDropout(ExpandFrame &f, DropoutOp dropout);
  std::optional<LogicalResult> expandActivationGrad(ExpandFrame &f);
  static int32_t geluTanhDerivative(KernelBuilder &kb, int32_t x);
  static int32_t geluErfDerivative(KernelBuilder &kb, int32_t x);
  LogicalResult expandEmbedding(ExpandFrame &f, EmbeddingOp embedding);
  LogicalResult expandRotary(ExpandFrame &f, RotaryOp rotary);
  /// Whether column v of the row (domain dim `dim`) is the id
  /// `vocab_start + v` below `vocab_size`: a real id of a rank's block of
  /// the vocabulary, not padding. I1.
  static int32_t realVocabColumn(KernelBuilder &kb, int dim,
                                 int64_t vocabStart, int64_t vocabSize);
  /// Row reductions: layer_norm, rms_norm, softmax, reduce_*,
  /// vocab_shard_max, vocab_shard_cross_entropy.
  std::optional<LogicalResult> expandRowReduction(ExpandFrame &f);
  /// Backward row ops: softmax_grad, the norm grads, cross_entropy_grad,
  /// vocab_shard_cross_entropy_grad.
  std::optional<LogicalResult> expandRowGrad(ExpandFrame &f);
  /// The scalar of operand `index` of the op being expanded, broadcast
  /// against its result.
  FailureOr<int32_t> arg(ExpandFrame &f, unsigned index);
  /// A row statistic (mean, rstd, lse, targets), loaded once per row.
  FailureOr<int32_t> rowScalar(ExpandFrame &f, Value value);
  /// Records the scalar of `result` and its map to domain dims.
  void define(Value result, int32_t scalar, ArrayRef<int> map);
  /// The scalar of `value` as an operand of an op whose result has `resultMap`
  /// (its dims to domain dims) and `resultShape`.
  FailureOr<int32_t> scalarOf(KernelBuilder &kb, Value value,
                              ArrayRef<int> resultMap,
                              ArrayRef<int64_t> resultShape);
  FailureOr<int32_t> loadWithMap(KernelBuilder &kb, Value value,
                                 ArrayRef<int> map);

  /// Ids read from an input index a table of `bound` rows: the runtime
  /// checks them before running (an out-of-range id is a data error).
  void noteIdBound(Value value, int64_t bound) {
    Value source = outer.count(value) ? outer.lookup(value) : value;
    auto it = views.find(source);
    if (it == views.end() ||
        program.buffers[it->second.buffer].kind != BufferKind::Input)
      return;
    auto [entry, inserted] = idBounds.try_emplace(it->second.buffer, bound);
    if (!inserted)
      entry->second = std::min(entry->second, bound);
  }

  func::FuncOp func;
  Program program;
  std::map<int32_t, int64_t> idBounds;
  int32_t rngBuffer = -1;
  // Multi-dimension reductions in a row group: the kernel reduces the row,
  // a second stage the other dims.
  DenseMap<Value, Operation *> partialReductions;
  // `llmc.updates`: returned value -> the argument it is written into, and
  // the values already stored there by their kernel.
  DenseMap<Value, BlockArgument> updateTargets;
  DenseSet<Value> storedInPlace;
  // Planned accumulations (planAccumulation): the op whose step adds into
  // an argument's buffer -> that argument, and the adds they replace ->
  // the argument that holds their result.
  DenseMap<Operation *, BlockArgument> accumulateInto;
  DenseMap<Operation *, BlockArgument> accumulatedAdds;
  // Casts of narrow GEMM products that an accumulating GEMM replaces.
  DenseSet<Operation *> accumulatedCasts;
  DenseMap<Operation *, unsigned> positions; // block order of top-level ops
  DenseMap<Value, TensorView> views;
  DenseMap<Value, double> splats; // constants and fills not in memory
  // The CollectiveStart steps whose wait is not scheduled yet.
  SmallVector<int32_t> collectivesInFlight;
  // While expanding a kernel: the scalars and dimension maps of its values,
  // and the outer value each block argument stands for.
  DenseMap<Value, int32_t> scalars;
  DenseMap<Value, SmallVector<int>> dimMaps;
  DenseMap<Value, Value> outer;
};

} // namespace mlir::llmc::lowering

#endif // LLMC_CODEGEN_LLMCTOKERNEL_LOWERINGSTATE_H
