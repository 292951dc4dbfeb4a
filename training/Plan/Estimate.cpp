// `llmc plan`'s memory and time model of one layout.
#include "training/Plan/Estimate.h"
#include "ir/TensorParallelSplit.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>

using namespace llvm;
using namespace mlir;
using namespace mlir::llmc;
using namespace mlir::llmc::plan;

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

namespace {
/// Bytes of one stored activation element: 16-bit for mixed precision (fp8
/// training keeps activations in bf16 outside its GEMMs), else fp32.
double activationElementBytes(Precision p) { return isHalf(p) ? 2 : 4; }
} // namespace

StateBytes plan::getStateBytes(Precision precision, Optimizer optimizer,
                               bool fp32Gradients, bool sgdMomentum) {
  StateBytes bytes;
  bool half = isHalf(precision);
  bytes.weights = half ? 2 : 4;
  bytes.gradients = half && !fp32Gradients ? 2 : 4;
  bytes.master = half ? 4 : 0; // fp32 master weights the optimizer updates
  switch (optimizer) {
  case Optimizer::AdamW:
    bytes.optimizer = 8; // m and v in fp32
    break;
  case Optimizer::AdamW8bit:
    // m and v in 8 bits, with one fp32 absmax per block of 2048 values
    // for each (Dettmers et al. 2022, block-wise quantization).
    bytes.optimizer = 2 + 2 * 4.0 / 2048;
    break;
  case Optimizer::Sgd:
    bytes.optimizer = sgdMomentum ? 4 : 0; // momentum in fp32
    break;
  }
  return bytes;
}

double plan::masterBytesPerParameter(const StateBytes &perParameter, int zero,
                                     int64_t dp) {
  // The fp32 copy the optimizer steps: mixed precision's master weights,
  // or with ZeRO-1/2 in fp32 the rank's partition of the weights (ZeRO-3
  // in fp32: the partition is the weights themselves).
  if (perParameter.master == 0 && zero >= 1 && zero < 3 && dp > 1)
    return 4;
  return perParameter.master;
}

StateBytes plan::shardStates(const StateBytes &perParameter, double parameters,
                             int zero, int64_t dp) {
  // ZeRO (Rajbhandari et al. 2020): stage 1 partitions the optimizer states
  // (master weights included), stage 2 also the gradients, stage 3 also
  // the weights, each over the data-parallel ranks.
  // As llmc-shard (and DeepSpeed) implement it: with the optimizer state
  // partitioned, the optimizer steps an fp32 copy of the rank's partition
  // of the weights even when the weights are fp32 (DeepSpeed's
  // single_partition_of_fp32_groups), and stage 1 keeps the full gradients
  // (micro-batches accumulate locally) next to the averaged partition they
  // are reduced into.
  StateBytes result;
  double d = static_cast<double>(dp);
  bool partitioned = zero >= 1 && dp > 1;
  double master = masterBytesPerParameter(perParameter, zero, dp);
  result.weights = parameters * perParameter.weights / (zero >= 3 ? d : 1);
  if (partitioned && zero == 1)
    result.gradients = parameters * perParameter.gradients * (1 + 1 / d);
  else
    result.gradients =
        parameters * perParameter.gradients / (zero >= 2 ? d : 1);
  result.master = parameters * master / (zero >= 1 ? d : 1);
  result.optimizer = parameters * perParameter.optimizer / (zero >= 1 ? d : 1);
  return result;
}

double BlockActivations::stored(Remat remat) const {
  switch (remat) {
  case Remat::None:
    return norms + attention + attentionCore + mlp;
  case Remat::Selective:
    return matmulOutputs;
  case Remat::Full:
    return blockInput;
  case Remat::Attention:
    return norms + attention + mlp;
  }
  llvm_unreachable("unknown remat policy");
}

BlockActivations plan::getBlockActivations(const ModelConfig &config,
                                           int64_t batch, int64_t seqLen,
                                           int64_t tp, Precision precision,
                                           bool sp) {
  double e = activationElementBytes(precision);
  double mask = config.dropout > 0 ? 1 : 0; // one byte per dropout mask
  double s = static_cast<double>(seqLen), b = static_cast<double>(batch);
  double h = static_cast<double>(config.nEmbd);
  double f = static_cast<double>(config.ffnHidden);
  double a = static_cast<double>(config.nHead);
  double sbh = s * b * h, sbf = s * b * f, as2b = a * s * s * b;
  // Tensor parallelism splits what lies between the column- and the
  // row-parallel projection over the t ranks (Korthikanti et al. sec.
  // 4.2.1); sequence parallelism (sec. 4.2.2) also the norms, dropout and
  // residual stream: `ts` divides those. The column-parallel projections'
  // inputs stay whole in both (llmc keeps the all-gathered tensor).
  double t = static_cast<double>(tp);
  double ts = sp ? t : 1;
  BlockActivations act;
  // Inputs of the two norms: 2sbh each in 16 bits.
  act.norms = 2 * e * sbh / ts;
  // QKV input 2sbh, Q and K 4sbh, V 2sbh, projection input 2sbh and the
  // projection's dropout mask sbh: 11sbh in 16 bits.
  act.attention = e * sbh + 4 * e * sbh / t + mask * sbh / ts;
  // Softmax output 2as^2b; with attention dropout also its mask as^2b and
  // its output 2as^2b: 5as^2b.
  act.attentionCore = (e + mask * (1 + e)) * as2b / t;
  // MLP input 2sbh and dropout mask sbh; GELU keeps its input and output
  // (8sbh each for f = 4h: 19sbh in all), ReLU its output only, SwiGLU the
  // gate and up projections and their product.
  double hidden = config.activation == Activation::SwiGlu ? 3
                  : config.activation == Activation::Relu ? 1
                                                          : 2;
  act.mlp = e * sbh + mask * sbh / ts + hidden * e * sbf / t;
  // Full recompute keeps each block's input only: 2sbh.
  act.blockInput = e * sbh / ts;
  // llmc-remat selective: the matmul and attention outputs and the block
  // input (see the header): QKV and attention outputs split by heads, the
  // row-parallel projections' outputs partial sums of the whole.
  double matmulHidden = config.activation == Activation::SwiGlu ? 2 : 1;
  act.matmulOutputs =
      e * ((4 * sbh + matmulHidden * sbf) / t + 2 * sbh + sbh / ts);
  return act;
}

PipelineCosts plan::pipelineCostsOf(const PlanModel &model, int64_t seqLen) {
  // Parameters in matmuls: every block, and the classifier (V x h) whether
  // tied or not; embeddings are lookups, not matmuls.
  std::vector<int64_t> blocks(model.numBlocks, model.blockParameters());
  return pipelineCosts(blocks, model.config.vocabSize, model.config.nEmbd,
                       seqLen);
}

double plan::modelFlopsPerToken(const PlanModel &model, int64_t seqLen) {
  return static_cast<double>(pipelineCostsOf(model, seqLen).total());
}

PipelineCut plan::pipelineCutOf(const PlanModel &model, int64_t seqLen,
                                int64_t pp) {
  return balancePipeline(pipelineCostsOf(model, seqLen), pp);
}


Layout plan::getConfiguredLayout(const TrainingFacts &train,
                                 const ClusterConfig &cluster) {
  Layout layout;
  layout.tp = cluster.tensorParallel;
  layout.sp = cluster.sequenceParallel && layout.tp > 1;
  layout.pp = cluster.pipelineParallel;
  layout.dp = std::max<int64_t>(1, cluster.numGpus() / (layout.tp * layout.pp));
  layout.zero = cluster.zero;
  layout.microBatch = train.microBatch;
  layout.remat = train.remat;
  return layout;
}

Error plan::validateLayout(const PlanModel &model, const TrainingFacts &train,
                           const ClusterConfig &cluster, const Layout &layout) {
  const ModelConfig &c = model.config;
  const Origins &o = train.origins, &co = cluster.origins;
  int64_t seqLen = train.seqLen ? train.seqLen : c.seqLen;
  if (seqLen > c.seqLen)
    return layoutError(o, "seq_len", "seq-len",
                       formatv("{0} is longer than the model's seq_len {1}",
                               seqLen, c.seqLen));
  if (c.nHead % layout.tp)
    return layoutError(co, "parallel.tp", "tp",
                       formatv("{0} does not divide n_head ({1}) of model "
                               "'{2}': each rank needs whole heads",
                               layout.tp, c.nHead, c.name));
  if (c.ffnHidden % layout.tp)
    return layoutError(co, "parallel.tp", "tp",
                       formatv("{0} does not divide the MLP width "
                               "ffn_hidden ({1}) of model '{2}'",
                               layout.tp, c.ffnHidden, c.name));
  if (layout.sp && seqLen % layout.tp)
    return layoutError(co, "parallel.sp", "sp",
                       formatv("the sequence of {0} tokens does not split "
                               "over tp {1} ranks",
                               seqLen, layout.tp));
  if (layout.pp > c.nLayer)
    return layoutError(co, "parallel.pp", "pp",
                       formatv("{0} is more than n_layer ({1}) of model "
                               "'{2}': every stage needs at least one block",
                               layout.pp, c.nLayer, c.name));
  int64_t gpus = cluster.numGpus();
  if (gpus % (layout.tp * layout.pp))
    return layoutError(
        co, layout.tp > 1 ? "parallel.tp" : "parallel.pp",
        layout.tp > 1 ? "tp" : "pp",
        formatv("tp {0} x pp {1} = {2} does not "
                "divide the cluster's {3} GPUs ({4} per node x {5} nodes)",
                layout.tp, layout.pp, layout.tp * layout.pp, gpus,
                cluster.gpusPerNode, cluster.nodes));
  int64_t global = globalBatchOf(train);
  if (global % (layout.microBatch * layout.dp))
    return layoutError(
        o, train.globalBatch ? "global_batch_size" : "micro_batch_size",
        train.globalBatch ? "global-batch-size" : "micro-batch-size",
        formatv("global batch {0} is not a multiple of micro-batch x "
                "data-parallel size = {1} x {2} = {3}",
                global, layout.microBatch, layout.dp,
                layout.microBatch * layout.dp));
  return Error::success();
}

namespace {
/// A tp rank's elements of the parameters split by vocabulary rows (each
/// [V, C]): ceil(V/tp) rows, the last rank's padded (ir/TensorParallelSplit.h).
double vocabShare(const PlanModel &model, int64_t elements, int64_t tp) {
  int64_t vocab = model.config.vocabSize;
  if (vocab <= 0)
    return static_cast<double>(elements) / static_cast<double>(tp);
  return static_cast<double>(elements) / static_cast<double>(vocab) *
         static_cast<double>(vocabRowsPerRank(vocab, tp));
}

/// The memory of pipeline stage `stage` under `layout`.
DeviceMemory stageMemory(const PlanModel &model, const TrainingFacts &train,
                         const ClusterConfig &cluster, const Layout &layout,
                         const PipelineCut &cut, const BlockActivations &block,
                         double extraFirst, double extraLast,
                         int64_t microBatches, int64_t stage, Remat remat) {
  double t = static_cast<double>(layout.tp);
  int64_t blocksPerStage = cut.blocksOf(stage);
  bool first = stage == 0, last = stage == layout.pp - 1;
  DeviceMemory memory;
  memory.stage = stage;
  double blockParams = model.blockSplit / t + model.blockReplicated;
  memory.parameters = blocksPerStage * blockParams;
  if (first)
    memory.parameters +=
        vocabShare(model, model.firstSplit, layout.tp) + model.firstReplicated;
  if (last) {
    memory.parameters +=
        vocabShare(model, model.lastSplit, layout.tp) + model.lastReplicated;
    // A tied classifier on the last of several stages needs its own copy
    // of the token embedding (Megatron all-reduces the two gradients).
    if (layout.pp > 1)
      memory.parameters += vocabShare(model, model.tiedEmbedding, layout.tp);
  }
  StateBytes perParameter =
      getStateBytes(train.precision, train.optimizer, train.fp32Gradients,
                    train.sgdMomentum);
  memory.states =
      shardStates(perParameter, memory.parameters, layout.zero, layout.dp);
  // 1F1B: stage k has pp - k micro-batches in flight after warm-up, so the
  // first stage holds the activations of pp of them (Narayanan et al. 2021).
  memory.microBatchesInFlight =
      std::min<int64_t>(layout.pp - stage, microBatches);
  double inFlight = static_cast<double>(memory.microBatchesInFlight);
  memory.activations = blocksPerStage * block.stored(remat) * inFlight;
  if (first)
    memory.activations += extraFirst * inFlight;
  if (last)
    memory.activations += extraLast;
  // Backward of one block holds the gradients of its activations (or, with
  // full recompute, its recomputed activations): about one block's worth.
  // ZeRO-3 gathers the weights of the current and the prefetched block.
  memory.workspace = block.stored(Remat::None);
  if (layout.zero == 3)
    memory.workspace += 2 * blockParams * perParameter.weights;
  memory.reserve = cluster.reserveGiB * kGiB;
  return memory;
}

/// The most loaded stage (the earliest of equals: under an uneven cut a
/// middle stage may hold more blocks than either end), or stage `only`.
DeviceMemory deviceMemory(const PlanModel &model, const TrainingFacts &train,
                          const ClusterConfig &cluster, const Layout &layout,
                          const PipelineCut &cut, const BlockActivations &block,
                          double extraFirst, double extraLast,
                          int64_t microBatches, Remat remat,
                          int64_t only = -1) {
  if (only >= 0)
    return stageMemory(model, train, cluster, layout, cut, block, extraFirst,
                       extraLast, microBatches, only, remat);
  DeviceMemory most;
  for (int64_t stage = 0; stage < layout.pp; ++stage) {
    DeviceMemory memory =
        stageMemory(model, train, cluster, layout, cut, block, extraFirst,
                    extraLast, microBatches, stage, remat);
    if (stage == 0 || memory.total() > most.total())
      most = memory;
  }
  return most;
}
} // namespace

namespace {
/// The memory phase: activations per block (formula) and the embedding's
/// and logits' extras, the pipeline cut, the device's memory under the
/// layout's remat and each other's. Returns the parameters of the most
/// loaded stage: their traffic and update pace the step whichever stage
/// the memory shows.
double estimateMemory(const PlanModel &model, const TrainingFacts &train,
                      const ClusterConfig &cluster, int64_t stage,
                      Estimate &est) {
  const ModelConfig &c = model.config;
  const Layout &layout = est.layout;
  int64_t m = est.microBatchesPerStep;
  double s = static_cast<double>(est.seqLen);
  double b = static_cast<double>(layout.microBatch);
  double t = static_cast<double>(layout.tp);
  double e = activationElementBytes(train.precision);
  double sbh = s * b * c.nEmbd;
  // Activations: blocks by formula, plus the embedding's dropout mask on
  // the first stage and, on the last, the final norm's and classifier's
  // inputs and the fp32 logits the loss keeps (Korthikanti et al.:
  // 4sbh/t (1 + v/h) in 16 bits), each tp rank's ceil(v/t) of them
  // (vocabulary-parallel cross-entropy).
  // With tp and no sequence parallelism the embedding's output and the
  // final norm's input are whole on every rank; the classifier's input is
  // whole in both (all-gathered for the column-parallel classifier).
  double ts = layout.sp ? t : 1;
  est.block = getBlockActivations(c, layout.microBatch, est.seqLen, layout.tp,
                                  train.precision, layout.sp);
  est.extraFirst = (c.dropout > 0 ? 1 : 0) * sbh / ts;
  est.extraLast = e * sbh / ts + e * sbh +
                  4 * s * b * double(vocabRowsPerRank(c.vocabSize, layout.tp));
  est.cut = pipelineCutOf(model, est.seqLen, layout.pp);
  est.memory = deviceMemory(model, train, cluster, layout, est.cut, est.block,
                            est.extraFirst, est.extraLast, m, layout.remat,
                            stage);
  for (Remat r :
       {Remat::None, Remat::Selective, Remat::Full, Remat::Attention})
    est.activationsByRemat[static_cast<unsigned>(r)] =
        deviceMemory(model, train, cluster, layout, est.cut, est.block,
                     est.extraFirst, est.extraLast, m, r, stage)
            .activations;
  return stage < 0
             ? est.memory.parameters
             : deviceMemory(model, train, cluster, layout, est.cut, est.block,
                            est.extraFirst, est.extraLast, m, layout.remat)
                   .parameters;
}

/// The FLOPs phase: model and recompute FLOPs per token, the tokens (given,
/// from steps, or Chinchilla's), training FLOPs and steps.
void estimateFlops(const PlanModel &model, const TrainingFacts &train,
                   Estimate &est) {
  const ModelConfig &c = model.config;
  const Layout &layout = est.layout;
  double s = static_cast<double>(est.seqLen);
  est.modelFlopsPerToken = modelFlopsPerToken(model, est.seqLen);
  double attentionCore = 4.0 * c.nLayer * c.nEmbd * s; // QK^T and AV
  // llmc-remat's selective recomputes no matmul, only the two norms (about
  // 5h FLOPs each), the MLP activation (about 8f) and the residual adds
  // (2h) per block: memory-bound work, priced here at the kernels' rate.
  if (layout.remat == Remat::Selective)
    est.recomputeFlopsPerToken =
        static_cast<double>(c.nLayer) * (12.0 * c.nEmbd + 8.0 * c.ffnHidden);
  else if (layout.remat == Remat::Attention)
    est.recomputeFlopsPerToken = attentionCore;
  else if (layout.remat == Remat::Full)
    est.recomputeFlopsPerToken =
        2.0 * model.numBlocks * model.blockParameters() + attentionCore;
  double tokensPerStep = static_cast<double>(est.globalBatch) * s;
  est.tokensFromChinchilla = train.tokens == 0 && train.steps == 0;
  est.tokens = train.tokens  ? train.tokens
               : train.steps ? train.steps * tokensPerStep
                             : chinchillaTokens(model.numParameters);
  est.trainingFlops = est.modelFlopsPerToken * est.tokens;
  est.steps = std::ceil(est.tokens / tokensPerStep);
}

/// The traffic phase: bytes per step and device on each axis. A ring
/// moves 2(n-1)/n of the data per GPU for an all-reduce and half that for
/// a reduce-scatter or all-gather.
void estimateTraffic(const PlanModel &model, const TrainingFacts &train,
                     double pacedParameters, Estimate &est) {
  const ModelConfig &c = model.config;
  const Layout &layout = est.layout;
  int64_t m = est.microBatchesPerStep;
  double s = static_cast<double>(est.seqLen);
  double b = static_cast<double>(layout.microBatch);
  double t = static_cast<double>(layout.tp);
  double e = activationElementBytes(train.precision);
  double sbh = s * b * c.nEmbd;
  StepTraffic &traffic = est.traffic;
  // The slowest stage: its blocks' all-reduces pace the step, and whether
  // it is the first or the last decides the embedding's and classifier's.
  int64_t pacedStage = 0;
  for (int64_t stage = 0; stage < layout.pp; ++stage)
    if (est.cut.stageCosts[stage] == est.cut.slowestCost()) {
      pacedStage = stage;
      break;
    }
  int64_t blocksPerStage = est.cut.blocksOf(pacedStage);
  bool firstStage = pacedStage == 0, lastStage = pacedStage == layout.pp - 1;
  double h = static_cast<double>(c.nEmbd);
  if (layout.tp > 1) {
    double ring = 2 * (t - 1) / t;
    // Per block two all-reduces forward and two backward (as reduce-
    // scatter/all-gather pairs with sequence parallelism), two more when
    // the forward is recomputed.
    double count = layout.remat == Remat::Full ? 6 : 4;
    double perMicroBatch = blocksPerStage * count * e * sbh;
    // The vocabulary-parallel embedding's partial rows are summed (first
    // stage); the classifier's input gradient is summed, and the
    // cross-entropy sums its row maxima, sums of exponentials and target
    // logits, f32 (last stage).
    if (firstStage)
      perMicroBatch += e * sbh;
    if (lastStage)
      perMicroBatch += e * sbh + 3 * 4 * s * b;
    // Sequence parallelism: the whole parameters used on the sequence
    // slice (norms, the row-parallel projections' biases, the learned
    // positions' T rows) get their f32 gradients summed in each backward.
    if (layout.sp) {
      bool normBias = c.norm == Norm::LayerNorm && c.bias;
      double norm = (normBias ? 2 : 1) * h;
      double perBlock = 2 * norm + (c.bias ? 2 * h : 0);
      double sliced = blocksPerStage * perBlock;
      if (lastStage)
        sliced += norm;
      if (firstStage && c.position == Position::Learned)
        sliced += s * h;
      perMicroBatch += 4 * sliced;
    }
    traffic.tp = m * ring * perMicroBatch;
  }
  // Each micro-batch's activations forward and their gradients backward.
  if (layout.pp > 1)
    traffic.pp = 2.0 * m * e * sbh / t;
  StateBytes perParameter =
      getStateBytes(train.precision, train.optimizer, train.fp32Gradients,
                    train.sgdMomentum);
  double grads = pacedParameters * perParameter.gradients;
  double weights = pacedParameters * perParameter.weights;
  // A tied embedding's gradient is summed between the first and the last
  // stage (two ranks: a ring all-reduce sends it once), each tp rank's
  // vocabulary rows, ZeRO's dp block of them.
  if (layout.pp > 1 && c.tieEmbeddings && (firstStage || lastStage))
    traffic.ppTied = double(vocabRowsPerRank(c.vocabSize, layout.tp)) * h *
                     perParameter.gradients /
                     (layout.zero >= 1 ? layout.dp : 1);
  if (layout.dp > 1) {
    double frac = (layout.dp - 1.0) / layout.dp;
    switch (layout.zero) {
    case 0: // all-reduce in the last micro-batch's backward
      traffic.dpGradients = 2 * frac * grads;
      break;
    case 1: // reduce-scatter in backward, all-gather of weights after
      traffic.dpGradients = frac * grads;
      traffic.dpWeights = frac * weights;
      break;
    case 2: // reduce-scatter in every micro-batch's backward
      traffic.dpGradients = m * frac * grads;
      traffic.dpWeights = frac * weights;
      break;
    default: // ZeRO-3: also gathers weights forward and backward
      traffic.dpGradients = m * frac * grads;
      traffic.dpWeights = m * 2 * frac * weights;
      break;
    }
  }
}

/// The time phase (needs a GPU): one step's parts on each device, then
/// time to train, cost and the MFU achieved.
void estimateStepTime(const TrainingFacts &train, const ClusterConfig &cluster,
                      const GpuSpec &gpu, double pacedParameters,
                      Estimate &est) {
  const Layout &layout = est.layout;
  const StepTraffic &traffic = est.traffic;
  int64_t m = est.microBatchesPerStep;
  double tokensPerStep =
      static_cast<double>(est.globalBatch) * static_cast<double>(est.seqLen);
  est.hasGpu = true;
  double gpus = static_cast<double>(cluster.numGpus());
  double rate = gpu.peakFlops(train.precision) * cluster.mfu;
  StepTime &step = est.step;
  step.compute = tokensPerStep * est.modelFlopsPerToken / (gpus * rate);
  step.recompute = tokensPerStep * est.recomputeFlopsPerToken / (gpus * rate);
  double work = step.compute + step.recompute;
  // The slowest stage sets the pace: each of the m + pp - 1 micro-batch
  // slots of 1F1B lasts its micro-batch, `imbalance` times an even
  // share's. The fill and drain are (pp - 1) of those slots.
  if (layout.pp > 1) {
    double pace = est.cut.imbalance();
    step.imbalance = work * (pace - 1);
    step.bubble = work * pace * (layout.pp - 1) / m;
  }
  // Datasheets give NVLink in both directions, a ring uses one.
  double nvlink = gpu.nvlinkGBps / 2 * 1e9, ib = gpu.ibGBps * 1e9;
  if (layout.tp > 1)
    step.tpComm =
        traffic.tp / (layout.tp <= cluster.gpusPerNode ? nvlink : ib);
  if (layout.pp > 1)
    step.ppComm = (traffic.pp + traffic.ppTied) /
                  (layout.tp * layout.pp <= cluster.gpusPerNode ? nvlink : ib);
  if (layout.dp > 1) {
    // The gradients' collectives overlap the backward (2/3 of the FLOPs);
    // ZeRO-1/2's all-gather of weights after it does not.
    double bandwidth = cluster.nodes > 1 ? ib : nvlink;
    double micro = work / m;
    double backward = micro * 2 / 3;
    double gradients = traffic.dpGradients / bandwidth;
    double weightsAlone = traffic.dpWeights / bandwidth;
    switch (layout.zero) {
    case 0:
    case 1:
      step.dpComm = std::max(0.0, gradients - backward) + weightsAlone;
      break;
    case 2: // every micro-batch's backward hides its own reduce-scatter
      step.dpComm = m * std::max(0.0, gradients / m - backward) + weightsAlone;
      break;
    default: // ZeRO-3: each micro-batch's gathers and reduce-scatters
      step.dpComm =
          m * std::max(0.0, (gradients + weightsAlone) / m - micro);
      break;
    }
  }
  // The optimizer update streams its states through HBM once per step:
  // reads the gradient, reads and writes master weights and moments, and
  // writes the weights the next forward uses. ZeRO-1+ updates 1/dp of them.
  StateBytes perParameter = getStateBytes(
      train.precision, train.optimizer, train.fp32Gradients, train.sgdMomentum);
  double updated = pacedParameters / (layout.zero >= 1 ? layout.dp : 1);
  double bytes = perParameter.gradients +
                 2 * (perParameter.master + perParameter.optimizer) +
                 perParameter.weights * (perParameter.master ? 1 : 2);
  step.optimizer = updated * bytes / (gpu.hbmTBps * 1e12);
  est.seconds = est.steps * step.total();
  est.cost = est.seconds / 3600 * gpus * cluster.pricePerGpuHour;
  est.achievedMfu = tokensPerStep * est.modelFlopsPerToken /
                    (step.total() * gpus * gpu.peakFlops(train.precision));
}
} // namespace

Estimate plan::estimate(const PlanModel &model, const TrainingFacts &train,
                        const ClusterConfig &cluster, const GpuSpec *gpu,
                        const Layout &layout, int64_t stage) {
  Estimate est;
  est.layout = layout;
  est.seqLen = train.seqLen ? train.seqLen : model.config.seqLen;
  est.globalBatch = globalBatchOf(train);
  est.microBatchesPerStep = est.globalBatch / (layout.microBatch * layout.dp);
  double pacedParameters = estimateMemory(model, train, cluster, stage, est);
  estimateFlops(model, train, est);
  estimateTraffic(model, train, pacedParameters, est);
  if (gpu)
    estimateStepTime(train, cluster, *gpu, pacedParameters, est);
  return est;
}
