// The artifact reader and writer: kir::Program <-> llmc_artifact.fbs.
#include "ir/kernel/Artifact.h"

#include "ir/kernel/AtomicFile.h"
#include "ir/kernel/Fuzzing.h"
#include "ir/kernel/llmc_artifact_generated.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Support/xxhash.h"

#include <algorithm>
#include <cstring>
#include <optional>

using namespace llmc;
using namespace llmc::kir;
using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

//===----------------------------------------------------------------------===//
// The schema's enums against kir's
//===----------------------------------------------------------------------===//

// Enum values are converted by casting, so each schema enum must list the
// kir values in the same order; these fail to compile when one side changes.
template <typename A, typename B> static constexpr bool same(A a, B b) {
  return uint8_t(a) == uint8_t(b);
}
static_assert(same(fb::DType::F32, kir::DType::F32) &&
              same(fb::DType::F16, kir::DType::F16) &&
              same(fb::DType::BF16, kir::DType::BF16) &&
              same(fb::DType::I32, kir::DType::I32) &&
              same(fb::DType::I64, kir::DType::I64) &&
              same(fb::DType::I1, kir::DType::I1) &&
              same(fb::DType::MAX, kir::DType::I1));
static_assert(
    same(fb::Op::Load, kir::Op::Load) && same(fb::Op::Const, kir::Op::Const) &&
    same(fb::Op::Index, kir::Op::Index) && same(fb::Op::Neg, kir::Op::Neg) &&
    same(fb::Op::Exp, kir::Op::Exp) && same(fb::Op::Log, kir::Op::Log) &&
    same(fb::Op::Tanh, kir::Op::Tanh) && same(fb::Op::Erf, kir::Op::Erf) &&
    same(fb::Op::Sqrt, kir::Op::Sqrt) && same(fb::Op::Rsqrt, kir::Op::Rsqrt) &&
    same(fb::Op::Sin, kir::Op::Sin) && same(fb::Op::Cos, kir::Op::Cos) &&
    same(fb::Op::Abs, kir::Op::Abs) && same(fb::Op::Add, kir::Op::Add) &&
    same(fb::Op::Sub, kir::Op::Sub) && same(fb::Op::Mul, kir::Op::Mul) &&
    same(fb::Op::Div, kir::Op::Div) && same(fb::Op::Max, kir::Op::Max) &&
    same(fb::Op::Min, kir::Op::Min) && same(fb::Op::Rem, kir::Op::Rem) &&
    same(fb::Op::CmpLt, kir::Op::CmpLt) &&
    same(fb::Op::CmpLe, kir::Op::CmpLe) &&
    same(fb::Op::CmpEq, kir::Op::CmpEq) &&
    same(fb::Op::Select, kir::Op::Select) &&
    same(fb::Op::IToF, kir::Op::IToF) &&
    same(fb::Op::ReduceSum, kir::Op::ReduceSum) &&
    same(fb::Op::ReduceMax, kir::Op::ReduceMax) &&
    same(fb::Op::Store, kir::Op::Store) &&
    same(fb::Op::Random, kir::Op::Random) &&
    same(fb::Op::RoundF16, kir::Op::RoundF16) &&
    same(fb::Op::RoundBF16, kir::Op::RoundBF16) &&
    same(fb::Op::MAX, kir::Op::RoundBF16));
static_assert(same(fb::BufferKind::Param, kir::BufferKind::Param) &&
              same(fb::BufferKind::Input, kir::BufferKind::Input) &&
              same(fb::BufferKind::Arena, kir::BufferKind::Arena) &&
              same(fb::BufferKind::State, kir::BufferKind::State) &&
              same(fb::BufferKind::MAX, kir::BufferKind::State));
static_assert(
    same(fb::StepScalar::None, kir::StepScalar::None) &&
    same(fb::StepScalar::DLoss, kir::StepScalar::DLoss) &&
    same(fb::StepScalar::Lr, kir::StepScalar::Lr) &&
    same(fb::StepScalar::BiasCorrection1, kir::StepScalar::BiasCorrection1) &&
    same(fb::StepScalar::BiasCorrection2, kir::StepScalar::BiasCorrection2) &&
    same(fb::StepScalar::Rng, kir::StepScalar::Rng) &&
    same(fb::StepScalar::Loss, kir::StepScalar::Loss) &&
    same(fb::StepScalar::GradNorm, kir::StepScalar::GradNorm) &&
    same(fb::StepScalar::Overflow, kir::StepScalar::Overflow) &&
    same(fb::StepScalar::UsedLossScale, kir::StepScalar::UsedLossScale) &&
    same(fb::StepScalar::LossScale, kir::StepScalar::LossScale) &&
    same(fb::StepScalar::LossScaleCleanSteps,
         kir::StepScalar::LossScaleCleanSteps) &&
    same(fb::StepScalar::LossScaleHysteresis,
         kir::StepScalar::LossScaleHysteresis) &&
    same(fb::StepScalar::MAX, kir::StepScalar::LossScaleSkippedSteps));
static_assert(same(fb::EpilogueKind::None, kir::EpilogueKind::None) &&
              same(fb::EpilogueKind::Bias, kir::EpilogueKind::Bias) &&
              same(fb::EpilogueKind::GeluBias, kir::EpilogueKind::GeluBias) &&
              same(fb::EpilogueKind::Gelu, kir::EpilogueKind::Gelu) &&
              same(fb::EpilogueKind::DGelu, kir::EpilogueKind::DGelu) &&
              same(fb::EpilogueKind::MAX, kir::EpilogueKind::DGelu));
// The step union: NONE, then kir::StepKind's values shifted by one.
static_assert(same(fb::StepOp::KernelStep, 1 + int(kir::StepKind::Kernel)) &&
              same(fb::StepOp::GemmStep, 1 + int(kir::StepKind::Gemm)) &&
              same(fb::StepOp::AttentionStep,
                   1 + int(kir::StepKind::Attention)) &&
              same(fb::StepOp::AttentionGradStep,
                   1 + int(kir::StepKind::AttentionGrad)) &&
              same(fb::StepOp::EmbeddingGradStep,
                   1 + int(kir::StepKind::EmbeddingGrad)) &&
              same(fb::StepOp::CollectiveStartStep,
                   1 + int(kir::StepKind::CollectiveStart)) &&
              same(fb::StepOp::CollectiveWaitStep,
                   1 + int(kir::StepKind::CollectiveWait)) &&
              same(fb::StepOp::MAX, 1 + int(kir::StepKind::CollectiveWait)));
static_assert(kArtifactIdentifier.size() == flatbuffers::kFileIdentifierLength);

//===----------------------------------------------------------------------===//
// Encoding
//===----------------------------------------------------------------------===//

// Each encoder creates a table's children before starting the table, as
// FlatBufferBuilder requires. Each takes its kir struct apart with a
// structured binding, which stops compiling when a field is added to the
// struct: store the new field in the schema, then extend the binding.

static Offset<fb::View> encodeView(FlatBufferBuilder &b, const kir::View &v) {
  const auto &[buffer, offset, strides] = v;
  auto strideVector = b.CreateVector(strides);
  fb::ViewBuilder out(b);
  out.add_buffer(buffer);
  out.add_offset(offset);
  out.add_strides(strideVector);
  return out.Finish();
}

static Offset<fb::Binding> encodeBinding(FlatBufferBuilder &b,
                                         const kir::Binding &binding) {
  const auto &[name, buffer, scalar] = binding;
  auto nameString = b.CreateString(name);
  fb::BindingBuilder out(b);
  out.add_name(nameString);
  out.add_buffer(buffer);
  out.add_step_scalar(fb::StepScalar(scalar));
  return out.Finish();
}

static Offset<fb::Buffer> encodeBuffer(FlatBufferBuilder &b,
                                       const kir::Buffer &buffer) {
  const auto &[name, kind, dtype, shape, offset, firstStep, lastStep, idBound,
                initialValue] = buffer;
  auto nameString = b.CreateString(name);
  auto shapeVector = b.CreateVector(shape);
  fb::BufferBuilder out(b);
  out.add_name(nameString);
  out.add_kind(fb::BufferKind(kind));
  out.add_dtype(fb::DType(dtype));
  out.add_shape(shapeVector);
  out.add_offset(offset);
  out.add_first_step(firstStep);
  out.add_last_step(lastStep);
  out.add_id_bound(idBound);
  out.add_initial_value(initialValue);
  return out.Finish();
}

static Offset<fb::Access> encodeAccess(FlatBufferBuilder &b,
                                       const kir::Access &access) {
  const auto &[buffer, dtype, offset, strides] = access;
  auto strideVector = b.CreateVector(strides);
  fb::AccessBuilder out(b);
  out.add_buffer(buffer);
  out.add_dtype(fb::DType(dtype));
  out.add_offset(offset);
  out.add_strides(strideVector);
  return out.Finish();
}

static Offset<fb::Instr> encodeInstr(FlatBufferBuilder &b,
                                     const kir::Instr &instr) {
  const auto &[op, type, args, operand, dim, imm] = instr;
  auto argVector = b.CreateVector(args);
  fb::InstrBuilder out(b);
  out.add_op(fb::Op(op));
  out.add_type(fb::DType(type));
  out.add_args(argVector);
  out.add_operand(operand);
  out.add_dim(dim);
  out.add_imm(imm);
  return out.Finish();
}

static Offset<fb::Kernel> encodeKernel(FlatBufferBuilder &b,
                                       const kir::Kernel &kernel) {
  const auto &[name, origin, domain, operands, body] = kernel;
  auto nameString = b.CreateString(name);
  auto originString = b.CreateString(origin);
  auto domainVector = b.CreateVector(domain);
  std::vector<Offset<fb::Access>> operandOffsets;
  for (const kir::Access &access : operands)
    operandOffsets.push_back(encodeAccess(b, access));
  auto operandVector = b.CreateVector(operandOffsets);
  std::vector<Offset<fb::Instr>> instrOffsets;
  for (const kir::Instr &instr : body)
    instrOffsets.push_back(encodeInstr(b, instr));
  auto bodyVector = b.CreateVector(instrOffsets);
  fb::KernelBuilder out(b);
  out.add_name(nameString);
  out.add_origin(originString);
  out.add_domain(domainVector);
  out.add_operands(operandVector);
  out.add_body(bodyVector);
  return out.Finish();
}

/// A library step's views in the order `visit` (a kir::forEach*View)
/// lists them: the schema's `views`, read back in the same order.
template <typename Visit>
static Offset<flatbuffers::Vector<Offset<fb::View>>>
encodeViews(FlatBufferBuilder &b, Visit visit) {
  std::vector<Offset<fb::View>> views;
  visit([&](const char *, const kir::View &view, kir::ViewRole,
            const std::vector<int64_t> &) {
    views.push_back(encodeView(b, view));
  });
  return b.CreateVector(views);
}

static Offset<fb::GemmStep> encodeGemm(FlatBufferBuilder &b,
                                       const kir::GemmStep &gemm) {
  const auto &[batch, m, n, k, transA, transB, a, bView, c, epilogue,
               accumulate, epilogueKind, epilogueBias, epilogueAux,
               sparseWeight] = gemm;
  auto views = encodeViews(
      b, [&](auto &&fn) { kir::forEachGemmView(gemm, fn); });
  fb::GemmStepBuilder out(b);
  out.add_batch(batch);
  out.add_m(m);
  out.add_n(n);
  out.add_k(k);
  out.add_trans_a(transA);
  out.add_trans_b(transB);
  out.add_epilogue(epilogue);
  out.add_accumulate(accumulate);
  out.add_epilogue_kind(fb::EpilogueKind(epilogueKind));
  out.add_views(views);
  out.add_sparse_weight(sparseWeight);
  return out.Finish();
}

/// The fields attention and its gradient share, into either table.
template <typename Builder>
static void encodeAttentionShape(Builder &out, int64_t batch, int64_t heads,
                                 int64_t seq, int64_t headDim, float scale,
                                 bool causal) {
  out.add_batch(batch);
  out.add_heads(heads);
  out.add_seq(seq);
  out.add_head_dim(headDim);
  out.add_scale(scale);
  out.add_causal(causal);
}

static Offset<fb::AttentionStep>
encodeAttention(FlatBufferBuilder &b, const kir::AttentionStep &attention) {
  const auto &[batch, heads, seq, headDim, scale, causal, q, k, v, outView,
               lse, kvSeq, positions] = attention;
  auto views = encodeViews(
      b, [&](auto &&fn) { kir::forEachAttentionView(attention, fn); });
  fb::AttentionStepBuilder out(b);
  encodeAttentionShape(out, batch, heads, seq, headDim, scale, causal);
  out.add_views(views);
  out.add_kv_seq(attention.keys());
  out.add_positioned(attention.positioned());
  return out.Finish();
}

static Offset<fb::AttentionGradStep>
encodeAttentionGrad(FlatBufferBuilder &b, const kir::AttentionGradStep &grad) {
  const auto &[batch, heads, seq, headDim, scale, causal, dout, q, k, v,
               outView, lse, dq, dk, dv] = grad;
  auto views = encodeViews(
      b, [&](auto &&fn) { kir::forEachAttentionGradView(grad, fn); });
  fb::AttentionGradStepBuilder out(b);
  encodeAttentionShape(out, batch, heads, seq, headDim, scale, causal);
  out.add_views(views);
  return out.Finish();
}

static Offset<fb::EmbeddingGradStep>
encodeEmbeddingGrad(FlatBufferBuilder &b, const kir::EmbeddingGradStep &grad) {
  const auto &[positions, rows, channels, ids, gradView, outView,
               accumulate] = grad;
  auto views = encodeViews(
      b, [&](auto &&fn) { kir::forEachEmbeddingGradView(grad, fn); });
  fb::EmbeddingGradStepBuilder out(b);
  out.add_positions(positions);
  out.add_rows(rows);
  out.add_channels(channels);
  out.add_accumulate(accumulate);
  out.add_views(views);
  return out.Finish();
}

/// Stores only the payload of the step's kind; the others read back as
static Offset<fb::CollectiveStartStep>
encodeCollective(FlatBufferBuilder &b, const kir::CollectiveStep &c) {
  // `start` is the wait's: a start step stores -1, which is not written.
  const auto &[kind, reduction, axis, axisSize, root, count, input, output,
               start] = c;
  auto axisString = b.CreateString(axis);
  auto views =
      encodeViews(b, [&](auto &&fn) { kir::forEachCollectiveView(c, fn); });
  fb::CollectiveStartStepBuilder out(b);
  out.add_kind(uint8_t(kind));
  out.add_reduction(uint8_t(reduction));
  out.add_axis(axisString);
  out.add_axis_size(axisSize);
  out.add_root(root);
  out.add_count(count);
  out.add_views(views);
  return out.Finish();
}

/// their defaults.
static Offset<fb::Step> encodeStep(FlatBufferBuilder &b,
                                   const kir::Step &step) {
  const auto &[kind, kernel, gemm, attention, attentionGrad, embeddingGrad,
               collective, origin] = step;
  fb::StepOp type = fb::StepOp::NONE;
  Offset<void> op;
  switch (kind) {
  case kir::StepKind::Kernel: {
    fb::KernelStepBuilder out(b);
    out.add_kernel(kernel);
    type = fb::StepOp::KernelStep;
    op = out.Finish().Union();
    break;
  }
  case kir::StepKind::Gemm:
    type = fb::StepOp::GemmStep;
    op = encodeGemm(b, gemm).Union();
    break;
  case kir::StepKind::Attention:
    type = fb::StepOp::AttentionStep;
    op = encodeAttention(b, attention).Union();
    break;
  case kir::StepKind::AttentionGrad:
    type = fb::StepOp::AttentionGradStep;
    op = encodeAttentionGrad(b, attentionGrad).Union();
    break;
  case kir::StepKind::EmbeddingGrad:
    type = fb::StepOp::EmbeddingGradStep;
    op = encodeEmbeddingGrad(b, embeddingGrad).Union();
    break;
  case kir::StepKind::CollectiveStart:
    type = fb::StepOp::CollectiveStartStep;
    op = encodeCollective(b, collective).Union();
    break;
  case kir::StepKind::CollectiveWait: {
    fb::CollectiveWaitStepBuilder out(b);
    out.add_start(collective.start);
    type = fb::StepOp::CollectiveWaitStep;
    op = out.Finish().Union();
    break;
  }
  }
  // A kind outside kir::StepKind is written as NONE, which readers refuse.
  auto originString = b.CreateString(origin);
  fb::StepBuilder out(b);
  out.add_op_type(type);
  if (type != fb::StepOp::NONE)
    out.add_op(op);
  out.add_origin(originString);
  return out.Finish();
}

static Offset<fb::ProgramDef> encodeProgram(FlatBufferBuilder &b,
                                            const kir::Program &program) {
  const auto &[function, modelJson, params, inputs, outputs, states, updates,
               buffers, kernels, steps, arenaBytes, adamBetas] = program;
  auto functionString = b.CreateString(function);
  auto modelJsonString = b.CreateString(modelJson);
  auto bindings = [&](const std::vector<kir::Binding> &list) {
    std::vector<Offset<fb::Binding>> out;
    for (const kir::Binding &binding : list)
      out.push_back(encodeBinding(b, binding));
    return b.CreateVector(out);
  };
  auto paramVector = bindings(params);
  auto inputVector = bindings(inputs);
  auto outputVector = bindings(outputs);
  auto stateVector = bindings(states);
  auto updateVector = bindings(updates);
  std::vector<Offset<fb::Buffer>> bufferOffsets;
  for (const kir::Buffer &buffer : buffers)
    bufferOffsets.push_back(encodeBuffer(b, buffer));
  auto bufferVector = b.CreateVector(bufferOffsets);
  std::vector<Offset<fb::Kernel>> kernelOffsets;
  for (const kir::Kernel &kernel : kernels)
    kernelOffsets.push_back(encodeKernel(b, kernel));
  auto kernelVector = b.CreateVector(kernelOffsets);
  std::vector<Offset<fb::Step>> stepOffsets;
  for (const kir::Step &step : steps)
    stepOffsets.push_back(encodeStep(b, step));
  auto stepVector = b.CreateVector(stepOffsets);
  Offset<flatbuffers::Vector<double>> betaVector;
  if (!adamBetas.empty())
    betaVector = b.CreateVector(adamBetas);
  fb::ProgramDefBuilder out(b);
  out.add_function(functionString);
  out.add_model_json(modelJsonString);
  out.add_params(paramVector);
  out.add_inputs(inputVector);
  out.add_outputs(outputVector);
  out.add_buffers(bufferVector);
  out.add_kernels(kernelVector);
  out.add_steps(stepVector);
  out.add_arena_bytes(arenaBytes);
  out.add_states(stateVector);
  out.add_updates(updateVector);
  if (!adamBetas.empty())
    out.add_adam_betas(betaVector);
  return out.Finish();
}

/// The checksum the schema defines: XXH3-64 of the whole file with the
/// checksum field's bytes as zero. `data` must be a verified envelope; its
/// checksum field is zeroed in place.
static uint64_t computeChecksum(uint8_t *data, size_t size) {
  fb::Artifact *artifact = fb::GetMutableSizePrefixedArtifact(data);
  artifact->mutate_checksum(0);
  return llvm::xxh3_64bits(llvm::ArrayRef<uint8_t>(data, size));
}

/// The CUDA section, in the envelope's builder.
static Offset<fb::CudaModule> encodeCuda(FlatBufferBuilder &b,
                                         const CudaSection &cuda) {
  const auto &[codegenVersion, source, cubins, ptx, ptxArch, launches] = cuda;
  auto sourceString = b.CreateString(source);
  auto ptxString = b.CreateString(ptx);
  std::vector<Offset<fb::CudaCubin>> cubinOffsets;
  for (const CudaSection::Cubin &cubin : cubins) {
    auto image = b.CreateVector(cubin.image);
    cubinOffsets.push_back(fb::CreateCudaCubin(b, cubin.arch, image));
  }
  auto cubinVector = b.CreateVector(cubinOffsets);
  std::vector<Offset<fb::CudaLaunch>> launchOffsets;
  for (const CudaSection::Launch &launch : launches) {
    auto kernel = b.CreateString(launch.kernel);
    auto grid = b.CreateVector(launch.grid, 3);
    auto block = b.CreateVector(launch.block, 3);
    launchOffsets.push_back(fb::CreateCudaLaunch(
        b, kernel, grid, block, launch.sharedBytes, launch.staticSharedBytes));
  }
  auto launchVector = b.CreateVector(launchOffsets);
  return fb::CreateCudaModule(b, codegenVersion, sourceString, cubinVector,
                              ptxString, ptxArch, launchVector);
}

std::vector<uint8_t>
llmc::kir::serializeProgram(const kir::Program &program) {
  return serializeArtifact(program, nullptr);
}

std::vector<uint8_t>
llmc::kir::serializeArtifact(const kir::Program &program,
                                 const CudaSection *cuda) {
  FlatBufferBuilder inner;
  inner.Finish(encodeProgram(inner, program));

  FlatBufferBuilder outer(inner.GetSize() + 64);
  // The checksum field must exist even while it is zero, and the format
  // version always does: a reader never has to guess at defaults here.
  outer.ForceDefaults(true);
  // The nested buffer has 8-byte scalars; align them in the file too.
  outer.ForceVectorAlignment(inner.GetSize(), sizeof(uint8_t),
                             alignof(uint64_t));
  auto programBytes =
      outer.CreateVector(inner.GetBufferPointer(), inner.GetSize());
  Offset<fb::CudaModule> cudaOffset;
  if (cuda)
    cudaOffset = encodeCuda(outer, *cuda);
  fb::ArtifactBuilder artifact(outer);
  artifact.add_format_version(kArtifactFormatVersion);
  artifact.add_checksum(0);
  artifact.add_program(programBytes);
  if (cuda)
    artifact.add_cuda(cudaOffset);
  fb::FinishSizePrefixedArtifactBuffer(outer, artifact.Finish());

  std::vector<uint8_t> bytes(outer.GetBufferPointer(),
                             outer.GetBufferPointer() + outer.GetSize());
  uint64_t checksum = computeChecksum(bytes.data(), bytes.size());
  fb::GetMutableSizePrefixedArtifact(bytes.data())->mutate_checksum(checksum);
  return bytes;
}

//===----------------------------------------------------------------------===//
// Decoding
//===----------------------------------------------------------------------===//

static llvm::Error makeError(llvm::StringRef name, const llvm::Twine &what) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 (name + ": " + what).str());
}

template <typename E> static bool inRange(E value) {
  return uint8_t(value) <= uint8_t(E::MAX);
}

static std::string toString(const flatbuffers::String *s) {
  return s ? s->str() : std::string();
}

/// The verifier checks a vector's length is 4-byte aligned, not that its
/// 8-byte elements are, so the elements are read unaligned-safe.
template <typename T>
static std::vector<T> toVector(const flatbuffers::Vector<T> *v) {
  std::vector<T> out;
  if (!v)
    return out;
  out.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i)
    out.push_back(llvm::support::endian::read<T, llvm::endianness::little>(
        v->Data() + i * sizeof(T)));
  return out;
}

namespace {
/// Turns a verified ProgramDef into a kir::Program. The FlatBuffers
/// verifier has checked every offset and size; this checks what it cannot,
/// the enum values.
class Decoder {
public:
  explicit Decoder(llvm::StringRef name) : name(name) {}

  llvm::Expected<kir::Program> decode(const fb::ProgramDef &def);

private:
  llvm::Error fail(const llvm::Twine &what) { return makeError(name, what); }
  std::vector<kir::Binding>
  decodeBindings(const flatbuffers::Vector<Offset<fb::Binding>> *list);
  llvm::Expected<kir::Buffer> decodeBuffer(size_t index, const fb::Buffer &def);
  llvm::Expected<kir::Kernel> decodeKernel(size_t index, const fb::Kernel &def);
  llvm::Expected<kir::Step> decodeStep(size_t index, const fb::Step &def);
  static kir::View decodeView(const fb::View *def);
  template <typename Visit>
  llvm::Error decodeViews(const std::string &what,
                          const flatbuffers::Vector<Offset<fb::View>> *views,
                          Visit visit);

  llvm::StringRef name;
};
} // namespace

std::vector<kir::Binding>
Decoder::decodeBindings(const flatbuffers::Vector<Offset<fb::Binding>> *list) {
  std::vector<kir::Binding> out;
  if (!list)
    return out;
  for (const fb::Binding *def : *list) {
    kir::Binding binding;
    binding.name = toString(def->name());
    binding.buffer = def->buffer();
    // Out of range reads as an unknown value that verifyProgram refuses.
    binding.scalar = kir::StepScalar(def->step_scalar());
    out.push_back(std::move(binding));
  }
  return out;
}

llvm::Expected<kir::Buffer> Decoder::decodeBuffer(size_t index,
                                                  const fb::Buffer &def) {
  kir::Buffer buffer;
  buffer.name = toString(def.name());
  if (!inRange(def.kind()))
    return fail("buffer " + llvm::Twine(index) + " ('" + buffer.name +
                "') has kind " + llvm::Twine(unsigned(def.kind())) +
                ", which this llmc does not know");
  if (!inRange(def.dtype()))
    return fail("buffer " + llvm::Twine(index) + " ('" + buffer.name +
                "') has element type " + llvm::Twine(unsigned(def.dtype())) +
                ", which this llmc does not know");
  buffer.kind = kir::BufferKind(def.kind());
  buffer.dtype = kir::DType(def.dtype());
  buffer.shape = toVector(def.shape());
  buffer.offset = def.offset();
  buffer.firstStep = def.first_step();
  buffer.lastStep = def.last_step();
  buffer.idBound = def.id_bound();
  buffer.initialValue = def.initial_value();
  return buffer;
}

llvm::Expected<kir::Kernel> Decoder::decodeKernel(size_t index,
                                                  const fb::Kernel &def) {
  kir::Kernel kernel;
  kernel.name = toString(def.name());
  kernel.origin = toString(def.origin());
  kernel.domain = toVector(def.domain());
  std::string what =
      "kernel " + std::to_string(index) + " ('" + kernel.name + "')";
  if (def.operands()) {
    for (auto [n, access] : llvm::enumerate(*def.operands())) {
      if (!inRange(access->dtype()))
        return fail(what + ", operand " + llvm::Twine(n) + ": element type " +
                    llvm::Twine(unsigned(access->dtype())) +
                    " is not one this llmc knows");
      kir::Access out;
      out.buffer = access->buffer();
      out.dtype = kir::DType(access->dtype());
      out.offset = access->offset();
      out.strides = toVector(access->strides());
      kernel.operands.push_back(std::move(out));
    }
  }
  if (def.body()) {
    for (auto [i, instr] : llvm::enumerate(*def.body())) {
      std::string at = what + ", instruction %" + std::to_string(i);
      if (!inRange(instr->op()))
        return fail(at + ": op " + llvm::Twine(unsigned(instr->op())) +
                    " is not one this llmc knows");
      if (!inRange(instr->type()))
        return fail(at + ": result type " +
                    llvm::Twine(unsigned(instr->type())) +
                    " is not one this llmc knows");
      kir::Instr out;
      out.op = kir::Op(instr->op());
      out.type = kir::DType(instr->type());
      out.args = toVector(instr->args());
      out.operand = instr->operand();
      out.dim = instr->dim();
      out.imm = instr->imm();
      kernel.body.push_back(std::move(out));
    }
  }
  return kernel;
}

kir::View Decoder::decodeView(const fb::View *def) {
  kir::View view;
  if (!def)
    return view;
  view.buffer = def->buffer();
  view.offset = def->offset();
  view.strides = toVector(def->strides());
  return view;
}

/// Fills a library step's views from the schema's `views`, in the order
/// `visit` (a kir::forEach*View) lists them; the counts must agree.
template <typename Visit>
llvm::Error
Decoder::decodeViews(const std::string &what,
                     const flatbuffers::Vector<Offset<fb::View>> *views,
                     Visit visit) {
  size_t stored = views ? views->size() : 0, listed = 0;
  visit([&](const char *, kir::View &view, kir::ViewRole,
            const std::vector<int64_t> &) {
    if (listed < stored)
      view = decodeView(views->Get(listed));
    ++listed;
  });
  if (listed != stored)
    return fail(what + " stores " + llvm::Twine(stored) +
                " views, its kind has " + llvm::Twine(listed));
  return llvm::Error::success();
}

/// The fields attention and its gradient share (kir::AttentionStep and
/// kir::AttentionGradStep, the schema's tables of the same names).
template <typename Out, typename Def>
static void decodeAttentionShape(Out &out, const Def &def) {
  out.batch = def.batch();
  out.heads = def.heads();
  out.seq = def.seq();
  out.headDim = def.head_dim();
  out.scale = def.scale();
  out.causal = def.causal();
}

llvm::Expected<kir::Step> Decoder::decodeStep(size_t index,
                                              const fb::Step &def) {
  kir::Step step;
  step.origin = toString(def.origin());
  std::string what = "step " + std::to_string(index);
  if (!inRange(def.op_type()))
    return fail(what + " has kind " + llvm::Twine(unsigned(def.op_type())) +
                ", which this llmc does not know");
  if (def.op_type() == fb::StepOp::NONE || !def.op())
    return fail(what + " has no operation");
  if (const fb::KernelStep *k = def.op_as_KernelStep()) {
    step.kind = kir::StepKind::Kernel;
    step.kernel = k->kernel();
  } else if (const fb::GemmStep *g = def.op_as_GemmStep()) {
    step.kind = kir::StepKind::Gemm;
    kir::GemmStep &out = step.gemm;
    out.batch = g->batch();
    out.m = g->m();
    out.n = g->n();
    out.k = g->k();
    out.transA = g->trans_a();
    out.transB = g->trans_b();
    out.epilogue = g->epilogue();
    out.accumulate = g->accumulate();
    if (!inRange(g->epilogue_kind()))
      return fail(what + " has epilogue kind " +
                  llvm::Twine(unsigned(g->epilogue_kind())) +
                  ", which this llmc does not know");
    out.epilogueKind = kir::EpilogueKind(g->epilogue_kind());
    out.sparseWeight = g->sparse_weight();
    if (llvm::Error err = decodeViews(what, g->views(), [&](auto &&fn) {
          kir::forEachGemmView(out, fn);
        }))
      return err;
  } else if (const fb::AttentionStep *a = def.op_as_AttentionStep()) {
    step.kind = kir::StepKind::Attention;
    kir::AttentionStep &out = step.attention;
    decodeAttentionShape(out, *a);
    out.kvSeq = a->kv_seq(); // checked by kir::verifyProgram
    out.positions.buffer = a->positioned() ? 0 : -1; // set by decodeViews
    if (llvm::Error err = decodeViews(what, a->views(), [&](auto &&fn) {
          kir::forEachAttentionView(out, fn);
        }))
      return err;
  } else if (const fb::AttentionGradStep *a = def.op_as_AttentionGradStep()) {
    step.kind = kir::StepKind::AttentionGrad;
    kir::AttentionGradStep &out = step.attentionGrad;
    decodeAttentionShape(out, *a);
    if (llvm::Error err = decodeViews(what, a->views(), [&](auto &&fn) {
          kir::forEachAttentionGradView(out, fn);
        }))
      return err;
  } else if (const fb::EmbeddingGradStep *e = def.op_as_EmbeddingGradStep()) {
    step.kind = kir::StepKind::EmbeddingGrad;
    kir::EmbeddingGradStep &out = step.embeddingGrad;
    out.positions = e->positions();
    out.rows = e->rows();
    out.channels = e->channels();
    out.accumulate = e->accumulate();
    if (llvm::Error err = decodeViews(what, e->views(), [&](auto &&fn) {
          kir::forEachEmbeddingGradView(out, fn);
        }))
      return err;
  } else if (const fb::CollectiveStartStep *c =
                 def.op_as_CollectiveStartStep()) {
    step.kind = kir::StepKind::CollectiveStart;
    kir::CollectiveStep &out = step.collective;
    if (c->kind() > uint8_t(kir::CollectiveKind::Recv) ||
        c->reduction() > uint8_t(kir::Reduction::Max))
      return fail(what + " has a collective kind or reduction this llmc "
                         "does not know");
    out.kind = kir::CollectiveKind(c->kind());
    out.reduction = kir::Reduction(c->reduction());
    out.axis = toString(c->axis());
    out.axisSize = c->axis_size();
    out.root = c->root();
    out.count = c->count();
    if (out.axisSize < 1 || out.count < 0 ||
        !llvm::checkedMul(out.count, out.axisSize))
      return fail(what + " has a collective of " + llvm::Twine(out.count) +
                  " elements on an axis of size " +
                  llvm::Twine(out.axisSize));
    if (llvm::Error err = decodeViews(what, c->views(), [&](auto &&fn) {
          kir::forEachCollectiveView(out, fn);
        }))
      return err;
  } else if (const fb::CollectiveWaitStep *w = def.op_as_CollectiveWaitStep()) {
    // Its fields are its start's, copied once every step is read.
    step.kind = kir::StepKind::CollectiveWait;
    step.collective.start = w->start();
  }
  return step;
}

llvm::Expected<kir::Program> Decoder::decode(const fb::ProgramDef &def) {
  kir::Program program;
  program.function = toString(def.function());
  program.modelJson = toString(def.model_json());
  program.params = decodeBindings(def.params());
  program.inputs = decodeBindings(def.inputs());
  program.outputs = decodeBindings(def.outputs());
  program.states = decodeBindings(def.states());
  program.updates = decodeBindings(def.updates());
  if (def.adam_betas())
    program.adamBetas.assign(def.adam_betas()->begin(),
                             def.adam_betas()->end());
  if (def.buffers())
    for (auto [index, buffer] : llvm::enumerate(*def.buffers())) {
      llvm::Expected<kir::Buffer> out = decodeBuffer(index, *buffer);
      if (!out)
        return out.takeError();
      program.buffers.push_back(std::move(*out));
    }
  if (def.kernels())
    for (auto [index, kernel] : llvm::enumerate(*def.kernels())) {
      llvm::Expected<kir::Kernel> out = decodeKernel(index, *kernel);
      if (!out)
        return out.takeError();
      program.kernels.push_back(std::move(*out));
    }
  if (def.steps())
    for (auto [index, step] : llvm::enumerate(*def.steps())) {
      llvm::Expected<kir::Step> out = decodeStep(index, *step);
      if (!out)
        return out.takeError();
      program.steps.push_back(std::move(*out));
    }
  for (auto [index, step] : llvm::enumerate(program.steps)) {
    if (step.kind != kir::StepKind::CollectiveWait)
      continue;
    int32_t start = step.collective.start;
    if (start < 0 || size_t(start) >= index ||
        program.steps[start].kind != kir::StepKind::CollectiveStart)
      return fail("step " + llvm::Twine(index) + " waits for step " +
                  llvm::Twine(start) + ", which is no earlier collective");
    step.collective = program.steps[start].collective;
    step.collective.start = start;
  }
  program.arenaBytes = def.arena_bytes();
  return program;
}

/// Whether offset + sum_d strides[d] * (shape[d] - 1), summed separately
/// over positive and other strides as kir::verifyProgram does, stays in
/// int64_t.
static bool reachFits(int64_t offset, const std::vector<int64_t> &strides,
                      const std::vector<int64_t> &shape) {
  std::optional<int64_t> low = offset, high = offset;
  for (size_t d = 0; d < std::min(strides.size(), shape.size()); ++d) {
    std::optional<int64_t> span = llvm::checkedSub(shape[d], int64_t(1));
    if (span)
      span = llvm::checkedMul(strides[d], *span);
    if (!span)
      return false;
    std::optional<int64_t> &bound = strides[d] > 0 ? high : low;
    bound = llvm::checkedAdd(*bound, *span);
    if (!bound)
      return false;
  }
  return true;
}

/// Whether the product of `extents` (times `scale`) stays in int64_t.
static bool productFits(const std::vector<int64_t> &extents,
                        int64_t scale = 1) {
  std::optional<int64_t> product = scale;
  for (int64_t extent : extents)
    if (!(product = llvm::checkedMul(*product, extent)))
      return false;
  return true;
}

/// What kir::verifyProgram assumes before it checks it, which a crafted
/// file need not satisfy: kir::computeLevels indexes a Load's overrides by
/// the row dimension, and the bounds checks use int64_t arithmetic that
/// must not overflow (undefined behavior, and a wrapped bounds check).
/// Empty when the program is safe to verify, else what is wrong.
static std::string checkBeforeVerifying(const kir::Program &program) {
  std::string message;
  llvm::raw_string_ostream os(message);
  for (const kir::Kernel &kernel : program.kernels)
    for (auto [i, instr] : llvm::enumerate(kernel.body)) {
      if (instr.op == kir::Op::Store && instr.args.empty()) {
        os << "kernel '" << kernel.name << "', instruction %" << i
           << " (store): has no value to store";
        return message;
      }
      if ((instr.op == kir::Op::Load || instr.op == kir::Op::Store) &&
          !kir::indexOverrides(instr).empty() &&
          kir::indexOverrides(instr).size() != kernel.domain.size()) {
        os << "kernel '" << kernel.name << "', instruction %" << i << " ("
           << kir::opName(instr.op) << "): has "
           << kir::indexOverrides(instr).size()
           << " index overrides, needs none or one per domain dimension ("
           << kernel.domain.size() << ")";
        return message;
      }
    }
  for (auto [index, buffer] : llvm::enumerate(program.buffers)) {
    bool fits = productFits(buffer.shape, kir::dtypeBytes(buffer.dtype));
    if (fits && buffer.kind == kir::BufferKind::Arena)
      fits = bool(llvm::checkedAdd(buffer.offset, buffer.bytes()));
    if (!fits) {
      os << "buffer " << index << " ('" << buffer.name
         << "'): its size or offset overflows 64 bits";
      return message;
    }
  }
  for (const kir::Kernel &kernel : program.kernels) {
    if (!productFits(kernel.domain)) {
      os << "kernel '" << kernel.name << "': its domain overflows 64 bits";
      return message;
    }
    for (auto [n, access] : llvm::enumerate(kernel.operands))
      if (!reachFits(access.offset, access.strides, kernel.domain)) {
        os << "kernel '" << kernel.name << "' operand " << n
           << ": its element range overflows 64 bits";
        return message;
      }
  }
  for (auto [index, step] : llvm::enumerate(program.steps)) {
    std::vector<std::pair<const kir::View *, std::vector<int64_t>>> views;
    kir::forEachView(step, [&](const char *, const kir::View &view,
                               kir::ViewRole,
                               const std::vector<int64_t> &shape) {
      views.push_back({&view, shape});
    });
    for (const auto &[view, shape] : views)
      if (!productFits(shape) ||
          !reachFits(view->offset, view->strides, shape)) {
        os << "step " << index
           << ": an operand's element range overflows 64 bits";
        return message;
      }
  }
  return message;
}

/// The CUDA section of a verified envelope, checked against its program.
static llvm::Expected<CudaSection> decodeCuda(const fb::CudaModule &def,
                                              const kir::Program &program,
                                              llvm::StringRef name) {
  CudaSection cuda;
  cuda.codegenVersion = def.codegen_version();
  cuda.source = toString(def.source());
  cuda.ptx = toString(def.ptx());
  cuda.ptxArch = def.ptx_arch();
  if (def.cubins())
    for (const fb::CudaCubin *cubin : *def.cubins()) {
      CudaSection::Cubin out;
      out.arch = cubin->arch();
      if (cubin->image())
        out.image.assign(cubin->image()->begin(), cubin->image()->end());
      cuda.cubins.push_back(std::move(out));
    }
  size_t count = def.launches() ? def.launches()->size() : 0;
  if (count != program.kernels.size())
    return makeError(name, llvm::formatv("the CUDA section has {0} launches "
                                         "for {1} kernels",
                                         count, program.kernels.size()));
  for (size_t i = 0; i < count; ++i) {
    const fb::CudaLaunch *launchDef = def.launches()->Get(i);
    CudaSection::Launch launch;
    launch.kernel = toString(launchDef->kernel());
    if (launch.kernel != program.kernels[i].name)
      return makeError(name, "the CUDA section's launch " + llvm::Twine(i) +
                                 " is for '" + launch.kernel +
                                 "', the program's kernel is '" +
                                 program.kernels[i].name + "'");
    std::vector<int64_t> grid = toVector(launchDef->grid());
    std::vector<int32_t> block = toVector(launchDef->block());
    if (grid.size() != 3 || block.size() != 3)
      return makeError(name, "the CUDA launch of '" + launch.kernel +
                                 "' needs 3 grid and 3 block extents");
    for (int d = 0; d < 3; ++d) {
      if (grid[d] < 1 || block[d] < 1)
        return makeError(name, "the CUDA launch of '" + launch.kernel +
                                   "' has a non-positive extent");
      launch.grid[d] = grid[d];
      launch.block[d] = block[d];
    }
    launch.sharedBytes = launchDef->shared_bytes();
    launch.staticSharedBytes = launchDef->static_shared_bytes();
    cuda.launches.push_back(std::move(launch));
  }
  return cuda;
}

llvm::Expected<kir::Program>
llmc::kir::deserializeProgram(llvm::ArrayRef<uint8_t> bytes,
                                  llvm::StringRef name) {
  llvm::Expected<ArtifactContents> contents = deserializeArtifact(bytes, name);
  if (!contents)
    return contents.takeError();
  return std::move(contents->program);
}

llvm::Expected<ArtifactContents>
llmc::kir::deserializeArtifact(llvm::ArrayRef<uint8_t> bytes,
                                   llvm::StringRef name) {
  auto fail = [&](const llvm::Twine &what) { return makeError(name, what); };
  // Bytes 0-3: the size of the rest; 4-7: the root offset; 8-11: "LLMC".
  constexpr size_t kHeaderBytes = 12;
  size_t size = bytes.size();
  if (size == 0)
    return fail("the file is empty, not an llmc artifact");
  if (size < kHeaderBytes)
    return fail("truncated or not an llmc artifact: " + llvm::Twine(size) +
                " bytes, fewer than the " + llvm::Twine(kHeaderBytes) +
                "-byte header");
  llvm::StringRef identifier(reinterpret_cast<const char *>(bytes.data()) + 8,
                             kArtifactIdentifier.size());
  if (identifier != kArtifactIdentifier) {
    std::string found;
    llvm::raw_string_ostream os(found);
    llvm::printEscapedString(identifier, os);
    return fail("not an llmc artifact: bytes 8-11 are \"" + found +
                "\", an artifact has \"" + kArtifactIdentifier + "\"");
  }
  uint64_t declared = uint64_t(llvm::support::endian::read32le(bytes.data())) +
                      sizeof(flatbuffers::uoffset_t);
  if (declared > size)
    return fail("truncated: the file has " + llvm::Twine(size) +
                " bytes, its header says " + llvm::Twine(declared));
  if (declared < size)
    return fail("corrupt: the file has " + llvm::Twine(size) +
                " bytes, its header says " + llvm::Twine(declared) +
                " (trailing data or a damaged header)");
  if (size >= FLATBUFFERS_MAX_BUFFER_SIZE)
    return fail("too large for a FlatBuffer: " + llvm::Twine(size) + " bytes");

  // A private copy: 8-byte aligned for the FlatBuffers accessors whatever
  // `bytes` is, and writable to zero the checksum field for hashing.
  std::vector<uint64_t> storage((size + 7) / 8);
  uint8_t *data = reinterpret_cast<uint8_t *>(storage.data());
  std::memcpy(data, bytes.data(), size);

  // The envelope alone first: the version decides how the rest is read.
  flatbuffers::Verifier::Options envelopeOptions;
  envelopeOptions.check_nested_flatbuffers = false;
  flatbuffers::Verifier envelope(data, size, envelopeOptions);
  if (!fb::VerifySizePrefixedArtifactBuffer(envelope))
    return fail("corrupt: the artifact header does not verify as a "
                "FlatBuffer");
  const fb::Artifact *artifact = fb::GetSizePrefixedArtifact(data);
  uint32_t version = artifact->format_version();
  if (version != kArtifactFormatVersion)
    return fail(llvm::formatv(
        "the artifact has format version {0}, this llmc reads format "
        "version {1}; {2}",
        version, kArtifactFormatVersion,
        version > kArtifactFormatVersion
            ? "it was written by a newer llmc: run that one, or recompile "
              "the model with this one"
            : "it was written by an older llmc: recompile the model"));
  // The envelope verifier has checked the field lies inside the buffer.
  if (!reinterpret_cast<const flatbuffers::Table *>(artifact)->GetAddressOf(
          fb::Artifact::VT_CHECKSUM))
    return fail("corrupt: the artifact has no checksum");
  uint64_t stored = artifact->checksum();
  uint64_t computed = computeChecksum(data, size);
  if (stored != computed && !kir::kFuzzing)
    return fail(llvm::formatv("checksum mismatch (stored {0:x16}, computed "
                              "{1:x16}): the file is damaged",
                              stored, computed));

  // The checksum matches, so what follows was written this way: a broken
  // or foreign writer, or a deliberately crafted file.
  const flatbuffers::Vector<uint8_t> *programBytes = artifact->program();
  if (!programBytes)
    return fail("malformed: the artifact holds no program");
  flatbuffers::Verifier::Options programOptions;
  // Every table takes bytes of its own, so this bounds work by file size
  // without limiting large programs.
  programOptions.max_tables = std::max<flatbuffers::uoffset_t>(
      programOptions.max_tables, flatbuffers::uoffset_t(size));
  flatbuffers::Verifier programVerifier(programBytes->data(),
                                        programBytes->size(), programOptions);
  if (!programVerifier.VerifyBuffer<fb::ProgramDef>(nullptr))
    return fail("malformed: the program does not verify as a FlatBuffer "
                "ProgramDef");
  llvm::Expected<kir::Program> program =
      Decoder(name).decode(*artifact->program_nested_root());
  if (!program)
    return program.takeError();
  std::string problem = checkBeforeVerifying(*program);
  if (problem.empty())
    problem = kir::verifyProgram(*program);
  if (!problem.empty())
    return fail("invalid program: " + problem);
  ArtifactContents contents;
  if (const fb::CudaModule *cuda = artifact->cuda()) {
    llvm::Expected<CudaSection> section = decodeCuda(*cuda, *program, name);
    if (!section)
      return section.takeError();
    contents.cuda = std::move(*section);
  }
  contents.program = std::move(*program);
  return contents;
}

//===----------------------------------------------------------------------===//
// Files
//===----------------------------------------------------------------------===//

llvm::Expected<kir::Program> llmc::kir::readArtifact(llvm::StringRef path) {
  llvm::Expected<ArtifactContents> contents = readArtifactContents(path);
  if (!contents)
    return contents.takeError();
  return std::move(contents->program);
}

llvm::Expected<ArtifactContents>
llmc::kir::readArtifactContents(llvm::StringRef path) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file =
      llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                  /*RequiresNullTerminator=*/false);
  if (!file)
    return makeError(path,
                     "cannot read the artifact: " + file.getError().message());
  return deserializeArtifact(llvm::arrayRefFromStringRef((*file)->getBuffer()),
                             path);
}

llvm::Error llmc::kir::writeArtifact(llvm::StringRef path,
                                         const kir::Program &program,
                                         const CudaSection *cuda) {
  std::string problem = kir::verifyProgram(program);
  if (!problem.empty())
    return makeError(path, "refusing to write an invalid program: " + problem);
  if (cuda && cuda->launches.size() != program.kernels.size())
    return makeError(path, "refusing to write a CUDA section whose launches "
                           "do not match the kernels");
  return writeFileAtomically(path, serializeArtifact(program, cuda));
}
