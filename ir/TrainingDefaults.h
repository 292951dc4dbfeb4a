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

} // namespace mlir::llmc::defaults

#endif // LLMC_IR_TRAININGDEFAULTS_H
