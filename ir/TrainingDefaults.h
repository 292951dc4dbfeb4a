// The defaults of the training step's hyperparameters, each written once.
// The training schema (frontend/TrainConfig.h) and the passes' own options
// (passes/Passes.td, what `llmc-opt --llmc-optimizer` uses without
// arguments) both read them here: ir/ is the lowest layer both may include.
#ifndef LLMC_IR_TRAININGDEFAULTS_H
#define LLMC_IR_TRAININGDEFAULTS_H

#include <cstdint>

namespace mlir::llmc::defaults {

// The optimizer (llmc-optimizer): PyTorch's AdamW/SGD names, GPT-3's betas
// and weight decay, clip_grad_norm_'s max_norm.
constexpr double kAdamBeta1 = 0.9;
constexpr double kAdamBeta2 = 0.95;
constexpr double kAdamEpsilon = 1e-8;
constexpr double kWeightDecay = 0.1;
constexpr double kSgdMomentum = 0.9;
constexpr double kMaxGradNorm = 1.0;

// Dynamic loss scaling (llmc-loss-scaling): DeepSpeed's DynamicLossScaler.
constexpr double kLossScaleInitialPower = 16;
constexpr int64_t kLossScaleWindow = 1000;
constexpr int64_t kLossScaleHysteresis = 2;
constexpr double kLossScaleMin = 1;
constexpr double kLossScaleFactor = 2;

// Data parallelism (llmc-shard): DDP's bucket_cap_mb.
constexpr double kGradientBucketMb = 25;

// The gradient norm's sums of squares taken where @grad_step makes each
// gradient (llmc-squares-in-grad-step), for gradients of at most this many
// elements: 4 Mi f32 elements, 16 MiB, half the 32 MiB L3 of the Zen 4
// the limit was chosen on (a larger one is out of the caches by the time
// its sum runs). A CPU setting: the pass does not run for a GPU
// (passes/Pipelines.cpp).
constexpr int64_t kSquaresInGradStepMaxElements = int64_t(1) << 22;
// ... and of at least this many (256 KiB of f32): a smaller one's sum costs
// less than the kernels that would take it in @grad_step (its sum, its
// copy into the state).
constexpr int64_t kSquaresInGradStepMinElements = int64_t(1) << 16;

} // namespace mlir::llmc::defaults

#endif // LLMC_IR_TRAININGDEFAULTS_H
