// The training config's table of keys: their paths, flags, values and help,
// the former names, and the help and reference printed from the table.
#include "frontend/TrainConfigParser.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>

using namespace llvm;
using namespace mlir::llmc;
using ::llmc::LossScaleConfig;
using ::llmc::OptimizerConfig;
using ::llmc::PrecisionConfig;
using ::llmc::RematConfig;
using ::llmc::LrSchedule;
using namespace mlir::llmc::trainconfig;

namespace mlir::llmc::trainconfig {

Section sectionKind(Key key) {
  if (key == Key::Model)
    return Section::Model;
  if (key >= Key::OptimizerName && key <= Key::MinLr)
    return Section::Optimizer;
  if (key >= Key::GlobalBatchSize && key <= Key::DataTokenizer)
    return Section::Batch;
  if (key >= Key::Precision && key <= Key::SparsityParams)
    return Section::Precision;
  if (key >= Key::ParallelDp && key <= Key::ParallelTimeout)
    return Section::Parallel;
  if (key >= Key::GuardAction && key <= Key::GuardMaxRollbacks)
    return Section::Guard;
  if (key >= Key::PlanGpu)
    return Section::Plan;
  return Section::Run; // logging, evaluation, checkpoints, seed, device
}

/// Whether a key of this kind takes a list (a YAML sequence, or comma
/// separated in a flag).
bool isListKind(Kind kind) {
  return kind == Kind::Paths || kind == Kind::Sources ||
         kind == Kind::Numbers || kind == Kind::Names;
}

// Sections whose keys are flags by their leaf name (when no other key has
// the same leaf); keys of other sections are flags by their whole path
// (`--batch-size-rampup-start`).
constexpr StringRef kLeafFlagSections[] = {"optimizer", "schedule", "data",
                                           "parallel", "plan"};

const KeyInfo kKeys[] = {
    {Key::Model, "model", Kind::Model, "PRESET|FILE|{...}",
     "the model: a preset, a model .yaml or .mlir, or an inline mapping of "
     "model config keys"},
    {Key::OptimizerName, "optimizer.name", Kind::String, "adamw|sgd",
     "the optimizer (default adamw)"},
    {Key::Lr, "optimizer.lr", Kind::Number, "X", "peak learning rate (3e-4)"},
    {Key::Betas, "optimizer.betas", Kind::Numbers, "B1,B2",
     "AdamW betas (0.9, 0.95)"},
    {Key::Eps, "optimizer.eps", Kind::Number, "X", "AdamW epsilon (1e-8)"},
    {Key::WeightDecay, "optimizer.weight_decay", Kind::Number, "X",
     "decoupled weight decay (0.1)"},
    {Key::Momentum, "optimizer.momentum", Kind::Number, "X",
     "SGD momentum (0.9)"},
    {Key::Nesterov, "optimizer.nesterov", Kind::Bool, "BOOL",
     "SGD Nesterov momentum (false)"},
    {Key::GradClip, "optimizer.grad_clip", Kind::Number, "X",
     "clip the global gradient norm to X; 0 turns clipping off (1.0)"},
    {Key::DecayNormsAndBiases, "optimizer.decay_norms_and_biases", Kind::Bool,
     "BOOL", "weight decay on biases and norm weights too (false)"},
    {Key::ScheduleName, "schedule.name", Kind::String,
     "constant|cosine|linear|one_cycle", "learning-rate schedule (cosine)"},
    {Key::WarmupSteps, "schedule.warmup_steps", Kind::NonNegative, "N",
     "linear warmup steps (Megatron --lr-warmup-iters; 0)"},
    {Key::DecaySteps, "schedule.decay_steps", Kind::NonNegative, "N",
     "step at which the decay reaches min_lr (--lr-decay-iters; default "
     "max_steps)"},
    {Key::MinLr, "schedule.min_lr", Kind::Number, "X",
     "learning rate at the end of the decay (--min-lr; 0)"},
    {Key::GlobalBatchSize, "global_batch_size", Kind::Positive, "N",
     "sequences per optimizer step (default micro_batch_size)"},
    {Key::MicroBatchSize, "micro_batch_size", Kind::Positive, "N",
     "sequences per forward/backward; global / micro gradients are "
     "accumulated (4)"},
    {Key::SeqLen, "seq_len", Kind::Positive, "N",
     "tokens per sequence (default the model's seq_len)"},
    {Key::RampupStart, "batch_size_rampup.start", Kind::NonNegative, "N",
     "batch-size ramp-up (Megatron --rampup-batch-size): first global "
     "batch; 0 is off"},
    {Key::RampupIncrement, "batch_size_rampup.increment", Kind::Positive, "N",
     "batch-size ramp-up: growth of each increment"},
    {Key::RampupSamples, "batch_size_rampup.samples", Kind::NonNegative, "N",
     "batch-size ramp-up: samples over which it reaches global_batch_size"},
    {Key::SeqLenWarmupStart, "seq_len_warmup.start", Kind::Positive, "N",
     "sequence-length warmup: first length (grows in steps of 8)"},
    {Key::SeqLenWarmupSteps, "seq_len_warmup.steps", Kind::NonNegative, "N",
     "sequence-length warmup: steps to reach seq_len; 0 is off"},
    {Key::MaxSteps, "max_steps", Kind::Positive, "N",
     "optimizer steps to train (this or max_tokens)"},
    {Key::MaxTokens, "max_tokens", Kind::Positive, "N",
     "tokens to train on, e.g. 1000000, 1e6, 300M, 180B or 1.4T (this or "
     "max_steps)"},
    {Key::DataTrain, "data.train", Kind::Sources, "FILE,...",
     "training data: token files or text, globs allowed (one source); or, "
     "in the file, a blend: a list of {path: FILE or [FILE, ...], weight: "
     "X, name: NAME} whose windows are drawn in proportion to the weights "
     "(docs/data.md)"},
    {Key::DataVal, "data.val", Kind::Paths, "FILE,...",
     "validation files (default: val_fraction of the training data)"},
    {Key::DataValFraction, "data.val_fraction", Kind::Number, "X",
     "fraction of the training data held out for validation when no val "
     "files are given (0)"},
    {Key::DataShuffleWindows, "data.shuffle_windows", Kind::Positive, "N",
     "the shuffle buffer: each epoch's windows are permuted in consecutive "
     "groups of N (4 bytes of memory a window per source) ($default)"},
    {Key::DataTokenizer, "data.tokenizer", Kind::Path, "byte|DIR",
     "byte, or a GPT-2 BPE directory (vocab.json, merges.txt) (byte)"},
    {Key::LogInterval, "log_interval", Kind::Positive, "N",
     "steps between progress lines and metrics (10)"},
    {Key::Progress, "progress", Kind::String, "auto|bar|lines",
     "how progress shows: a live bar with tokens/s, MFU, ETA and loss "
     "above the logged lines (bar), the lines only (lines), or bar on a "
     "terminal and lines elsewhere (auto)"},
    {Key::EvalInterval, "eval_interval", Kind::NonNegative, "N",
     "steps between evaluations; 0: only at the end (100)"},
    {Key::EvalSteps, "eval_steps", Kind::NonNegative, "N",
     "validation batches per evaluation; 0: no validation loss (10)"},
    {Key::SampleTokens, "sample_tokens", Kind::NonNegative, "N",
     "tokens sampled at each evaluation; 0: none (64)"},
    {Key::CheckpointInterval, "checkpoint_interval", Kind::NonNegative, "N",
     "steps between checkpoints; 0: only at the end (0)"},
    {Key::KeepCheckpoints, "keep_checkpoints", Kind::NonNegative, "K",
     "keep the last K checkpoints; 0 keeps all ($default)"},
    {Key::Seed, "seed", Kind::NonNegative, "N",
     "initialization, data order, dropout and sampling (1337)"},
    {Key::Precision, "precision", Kind::String, "fp32|fp16|bf16",
     "fp32, or mixed precision (llmc-amp): allow-listed ops (matmuls, "
     "attention) in fp16 or bf16, fp32 master weights and optimizer state "
     "(fp32)"},
    {Key::AmpAllow, "amp.allow", Kind::Names, "OP,...",
     "ops moved onto the low-precision list, e.g. llmc.softmax"},
    {Key::AmpDeny, "amp.deny", Kind::Names, "OP,...",
     "ops moved onto the fp32 list, e.g. llmc.matmul"},
    {Key::LossScaleInitialPower, "loss_scale.initial_scale_power",
     Kind::Number, "X", "fp16: the loss scale starts at 2^X (16)"},
    {Key::LossScaleWindow, "loss_scale.window", Kind::Positive, "N",
     "fp16: clean steps in a row before the scale doubles (1000)"},
    {Key::LossScaleHysteresis, "loss_scale.hysteresis", Kind::Positive, "N",
     "fp16: overflows it takes to halve the scale (2)"},
    {Key::LossScaleMin, "loss_scale.min_scale", Kind::Number, "X",
     "fp16: the smallest scale; overflowing there stops the run (1)"},
    {Key::LossScaleConsecutiveHysteresis, "loss_scale.consecutive_hysteresis",
     Kind::Bool, "BOOL",
     "fp16: a clean step restores the hysteresis (false)"},
    {Key::Remat, "remat", Kind::String, "none|full|selective|budget",
     "activation checkpointing (llmc-remat): none; full (keep each "
     "transformer block's input, recompute the block); selective (keep "
     "matmul and attention outputs, recompute the cheap ops); budget (fit "
     "remat_budget) (none)"},
    {Key::RematBudget, "remat_budget", Kind::Bytes, "SIZE",
     "remat budget: the planned activation peak must fit, e.g. 512MiB"},
    {Key::SparsityPattern, "sparsity.pattern", Kind::String, "2:4",
     "structured sparsity (llmc-sparsify, Apex ASP's m4n2_1d): keep the 2 "
     "largest magnitudes of every 4 along each selected weight's reduction "
     "dimension; giving any sparsity key turns it on (2:4)"},
    {Key::SparsityPruneAtStep, "sparsity.prune_at_step", Kind::NonNegative,
     "N", "sparsity: train densely for N steps, then prune once and "
          "fine-tune with the masks fixed; 0 prunes the initial (e.g. "
          "init_from) weights (0)"},
    {Key::SparsityParams, "sparsity.params", Kind::Names, "GLOB,...",
     "sparsity: parameter-name patterns of the weights to prune, e.g. "
     "h.*.mlp.* (default: every matmul weight inside the transformer "
     "blocks, not the embeddings or the classifier)"},
    {Key::ParallelDp, "parallel.dp", Kind::Positive, "N",
     "data-parallel ranks (llmc-shard); dp * tp * pp must equal the "
     "launcher's world size, e.g. mpirun -np N (default: world / (tp * pp))"},
    {Key::ParallelTp, "parallel.tp", Kind::Positive, "N",
     "tensor-parallel ranks (Megatron-LM, llmc-tensor-parallel): attention "
     "heads, the MLP's hidden units and the vocabulary (embedding, "
     "classifier, cross-entropy) are split over them; "
     "the world size is dp * tp * pp, ranks tp-fastest (1)"},
    {Key::ParallelSp, "parallel.sp", Kind::Bool, "BOOL",
     "sequence parallelism (Korthikanti et al.) with tp above 1: norms, "
     "dropout, biases and residual adds run on each tp rank's 1/tp of the "
     "sequence (all-gather and reduce-scatter in place of the all-reduces); "
     "seq_len must be a multiple of tp (false)"},
    {Key::ParallelPp, "parallel.pp", Kind::Positive, "N",
     "pipeline-parallel stages (llmc-pipeline-parallel): the transformer "
     "blocks are cut into pp stages balanced by the planner's FLOPs (the "
     "cut is printed; llmc plan shows the same) and run in the 1F1B order "
     "over the micro-batches; pp at most n_layer (1)"},
    {Key::ParallelZero, "parallel.zero", Kind::NonNegative, "0-3",
     "ZeRO stage: 0 replicates all state (DDP), 1 shards the optimizer "
     "state, 2 also the gradients, 3 also the parameters; with pp, over "
     "each stage's dp ranks (0)"},
    {Key::ParallelBucketMb, "parallel.bucket_mb", Kind::Number, "X",
     "gradient all-reduce bucket cap in MiB, DDP's bucket_cap_mb (25)"},
    {Key::ParallelTimeout, "parallel.timeout", Kind::Number, "SECONDS",
     "a collective that makes no progress this long names the rank that "
     "did not arrive and stops the job (30)"},
    {Key::GuardAction, "guard.action", Kind::String, "off|warn|stop|rollback",
     "on a loss or gradient-norm spike: nothing (off), log it (warn), stop "
     "(stop), or go back to the last snapshot, skip the data since, lower "
     "the lr and retry (rollback); a NaN/inf loss or gradient norm stops the "
     "run unless rollback (warn)"},
    {Key::GuardWindow, "guard.window", Kind::Positive, "N",
     "steps of loss and gradient-norm history spikes are judged against; "
     "none before it is full (50)"},
    {Key::GuardZscore, "guard.zscore", Kind::Number, "Z",
     "a spike: loss above the window's mean + Z standard deviations; 0 is "
     "off (6)"},
    {Key::GuardRatio, "guard.ratio", Kind::Number, "R",
     "a spike: loss above R x the window's mean; 0 is off (0)"},
    {Key::GuardMaxGradNormRatio, "guard.max_grad_norm_ratio", Kind::Number,
     "R", "a spike: gradient norm above R x the window's median; 0 is off "
     "(0)"},
    {Key::GuardSnapshotInterval, "guard.snapshot_interval", Kind::Positive,
     "N", "rollback: steps between in-memory snapshots of the training state "
     "(checkpoints are snapshots too) (50)"},
    {Key::GuardLrFactor, "guard.lr_factor", Kind::Number, "X",
     "rollback: multiply the learning rate by X (0 < X <= 1) (0.5)"},
    {Key::GuardCooldown, "guard.cooldown", Kind::NonNegative, "N",
     "rollback: steps the lower learning rate lasts; 0: the rest of the "
     "run (100)"},
    {Key::GuardMaxRollbacks, "guard.max_rollbacks", Kind::Positive, "N",
     "rollback: more rollbacks in a row without getting past the spike "
     "stop the run (3)"},
    {Key::Dropout, "dropout", Kind::Number, "X",
     "overrides the model's dropout rate"},
    {Key::Threads, "threads", Kind::NonNegative, "N",
     "CPU threads per rank; 0: the CPUs this process may use (affinity, cgroup quota, divided among the ranks on the node) (0)"},
    {Key::Device, "device", Kind::String, "cpu|cuda",
     "where the steps run: cpu, or cuda (an NVIDIA GPU; driver loaded at run "
     "time) (cpu)"},
    {Key::Out, "out", Kind::String, "DIR",
     "output directory: metrics.jsonl, loss.svg, checkpoints/ (default "
     "runs/<config name>)"},
    {Key::InitFrom, "init_from", Kind::Path, "FILE",
     "start from these weights: an llm.c checkpoint or safetensors"},
    // The plan section: read by llmc plan only (llmc run ignores it).
    {Key::PlanGpu, "plan.gpu", Kind::String, "NAME",
     "llmc plan: the GPU, a name in the hardware data file (llmc plan "
     "--list-gpus), e.g. a100-80gb, h100-sxm (default: none, no time or "
     "cost)"},
    {Key::PlanGpusPerNode, "plan.gpus_per_node", Kind::Positive, "N",
     "llmc plan: GPUs per node (8)"},
    {Key::PlanNodes, "plan.nodes", Kind::Positive, "N",
     "llmc plan: nodes; the GPUs are nodes x gpus_per_node = dp x tp x pp "
     "(1)"},
    {Key::PlanPricePerGpuHour, "plan.price_per_gpu_hour", Kind::Number, "USD",
     "llmc plan: price of a GPU-hour (default: no cost estimate)"},
    {Key::PlanMfu, "plan.mfu", Kind::Number, "X",
     "llmc plan: fraction of peak the kernels reach on the model's FLOPs, "
     "assumed or measured; bubbles, recompute and communication come on "
     "top (0.4)"},
    {Key::PlanReserveGib, "plan.reserve_gib", Kind::Number, "GIB",
     "llmc plan: per-device memory for the CUDA context and library "
     "workspaces (1)"},
    {Key::PlanRestarts, "plan.restarts", Kind::NonNegative, "N",
     "llmc plan: job restarts over the run: each re-launches, reloads the "
     "last checkpoint and redoes the work since it (0)"},
    {Key::PlanRestartMinutes, "plan.restart_minutes", Kind::Number, "MIN",
     "llmc plan: re-launch per restart before the reload: scheduling, "
     "process start, NCCL init (10, assumed)"},
    {Key::PlanStorageWriteGbps, "plan.storage_write_gbps", Kind::Number,
     "GB/S", "llmc plan: aggregate checkpoint write bandwidth (10, assumed)"},
    {Key::PlanStorageReadGbps, "plan.storage_read_gbps", Kind::Number, "GB/S",
     "llmc plan: aggregate reload bandwidth (default: the write "
     "bandwidth)"},
    {Key::PlanObservedDays, "plan.observed_days", Kind::Number, "DAYS",
     "llmc plan: wall-clock days a real run of this plan took: prints its "
     "implied MFU and the gap to the plan, split into checkpoints, "
     "restarts, lost work and what is unexplained (this or "
     "observed_step_time)"},
    {Key::PlanObservedStepTime, "plan.observed_step_time", Kind::Number, "S",
     "llmc plan: measured seconds per optimizer step: prints its implied "
     "MFU, the gap to the plan's step time and the wall-clock time at that "
     "speed with the overheads"},
    {Key::PlanGradPrecision, "plan.grad_precision", Kind::String, "fp32|half",
     "llmc plan: gradients accumulate in fp32 as llmc run's (18 bytes per "
     "parameter with AdamW and mixed precision), or in 16 bits (half, 16 "
     "bytes) as Megatron-LM's fp16 runs (fp32)"},
};

/// Keys and flags that changed name (llmc plan's former cluster file and
/// flags): a config or command line that uses one is told the new name.
struct RenamedKey {
  StringRef old, now;
};
constexpr RenamedKey kRenamedKeys[] = {
    {"tensor_parallel", "parallel.tp"},
    {"pipeline_parallel", "parallel.pp"},
    {"sequence_parallel", "parallel.sp"},
    {"zero", "parallel.zero"},
    {"gpu", "plan.gpu"},
    {"gpus_per_node", "plan.gpus_per_node"},
    {"nodes", "plan.nodes"},
    {"price_per_gpu_hour", "plan.price_per_gpu_hour"},
    {"mfu", "plan.mfu"},
    {"reserve_gib", "plan.reserve_gib"},
    {"restarts", "plan.restarts"},
    {"restart_minutes", "plan.restart_minutes"},
    {"storage_write_gbps", "plan.storage_write_gbps"},
    {"storage_read_gbps", "plan.storage_read_gbps"},
    {"observed_days", "plan.observed_days"},
    {"observed_step_time", "plan.observed_step_time"},
};
constexpr RenamedKey kRenamedFlags[] = {
    {"micro-batch", "micro-batch-size"},
    {"global-batch", "global-batch-size"},
    {"tokens", "max-tokens"},
    {"price", "price-per-gpu-hour"},
};

/// "'x' is now parallel.tp" for a key of the former cluster file.
std::optional<std::string> renamedKeyMessage(StringRef name) {
  for (const RenamedKey &r : kRenamedKeys)
    if (r.old == name)
      return ("'" + name + "' is now '" + r.now +
              "' (one schema for llmc run and llmc plan; see "
              "docs/config-keys.md)")
          .str();
  return std::nullopt;
}

const KeyInfo &info(Key key) {
  for (const KeyInfo &k : kKeys)
    if (k.key == key)
      return k;
  llvm_unreachable("key not in the table");
}

StringRef sectionOf(StringRef path) {
  size_t dot = path.find('.');
  return dot == StringRef::npos ? StringRef() : path.take_front(dot);
}
StringRef leafOf(StringRef path) { return path.rsplit('.').second.empty()
                                              ? path
                                              : path.rsplit('.').second; }

std::string dashes(StringRef text) {
  std::string result = text.str();
  for (char &c : result)
    if (c == '_' || c == '.')
      c = '-';
  return result;
}

/// The flag a key is given by: the section name for a section's `name`
/// (`--optimizer sgd`), the leaf for keys of the optimizer, schedule and
/// data sections when no other key ends the same, else the whole path.
std::string primaryFlag(const KeyInfo &k) {
  StringRef section = sectionOf(k.path);
  if (section.empty())
    return dashes(k.path);
  StringRef leaf = leafOf(k.path);
  if (leaf == "name")
    return dashes(section);
  if (is_contained(kLeafFlagSections, section) &&
      count_if(kKeys, [&](const KeyInfo &o) {
        return leafOf(o.path) == leaf;
      }) == 1)
    return dashes(leaf);
  return dashes(k.path);
}

/// Every flag of a key: the primary one and the whole path.
SmallVector<std::string, 2> flagsOf(const KeyInfo &k) {
  SmallVector<std::string, 2> flags = {primaryFlag(k)};
  if (dashes(k.path) != flags[0])
    flags.push_back(dashes(k.path));
  return flags;
}

const KeyInfo *lookupFlag(StringRef flag) {
  for (const KeyInfo &k : kKeys)
    for (const std::string &f : flagsOf(k))
      if (f == flag)
        return &k;
  return nullptr;
}

ArrayRef<KeyInfo> keyTable() { return kKeys; }

std::optional<std::string> renamedFlagMessage(StringRef name) {
  for (const RenamedKey &r : kRenamedFlags)
    if (r.old == name)
      return ("--" + name + " is now --" + r.now +
              " (one schema for llmc run and llmc plan; see "
              "docs/config-keys.md)")
          .str();
  return std::nullopt;
}

} // namespace mlir::llmc::trainconfig

bool mlir::llmc::isTrainingConfigText(StringRef text, StringRef bufferName) {
  config::YamlFile file(text, bufferName);
  Expected<const config::YNode *> root = file.root("keys");
  if (!root) {
    // Either reader reports the YAML error the same way.
    consumeError(root.takeError());
    return true;
  }
  // seq_len and dropout are keys of both.
  for (const config::YNode &key : (*root)->keys) {
    StringRef name = key.text;
    if (name == "seq_len" || name == "dropout")
      continue;
    if (renamedKeyMessage(name) || any_of(kKeys, [&](const KeyInfo &k) {
          return k.path == name || sectionOf(k.path) == name;
        }))
      return true;
  }
  return false;
}

bool mlir::llmc::isTrainingConfigFlag(StringRef flag) {
  return lookupFlag(flag.split('=').first) != nullptr;
}

namespace {
/// A key's help with its default filled in where the help names it by
/// "$default" (the default is written once, in TrainConfig.h).
std::string helpOf(const KeyInfo &k) {
  std::string help = k.help.str();
  size_t at = help.find("$default");
  if (at == std::string::npos)
    return help;
  std::string value;
  switch (k.key) {
  case Key::KeepCheckpoints:
    value = std::to_string(::llmc::kDefaultKeepCheckpoints);
    break;
  case Key::DataShuffleWindows:
    value = std::to_string(::llmc::kDefaultShuffleWindows);
    break;
  default:
    llvm_unreachable("$default in the help of a key without one");
  }
  return help.replace(at, strlen("$default"), value);
}

/// What a section holds, for the reference's headings.
struct SectionDoc {
  StringRef name, title, about;
};
constexpr SectionDoc kSectionDocs[] = {
    {"", "Top-level keys",
     "The model, the batch and the run's length, logging, evaluation, "
     "checkpoints, precision and activation checkpointing."},
    {"optimizer", "optimizer", "The optimizer compiled into the update step; "
                               "`optimizer: sgd` is `optimizer: {name: sgd}`."},
    {"schedule", "schedule", "The learning-rate schedule."},
    {"batch_size_rampup", "batch_size_rampup",
     "Megatron-LM's batch-size ramp-up."},
    {"seq_len_warmup", "seq_len_warmup", "Sequence-length warmup."},
    {"data", "data", "Training and validation data and the tokenizer."},
    {"amp", "amp", "Mixed precision's op lists (precision fp16 or bf16)."},
    {"loss_scale", "loss_scale", "Dynamic loss scaling (precision fp16)."},
    {"sparsity", "sparsity", "2:4 structured sparsity."},
    {"parallel", "parallel",
     "The device mesh dp x tp x pp, ZeRO and the collectives; llmc plan "
     "plans this layout."},
    {"guard", "guard", "Loss-spike and divergence handling."},
    {"plan", "plan",
     "What `llmc plan` needs besides the run: the GPUs, their price and "
     "speed, restarts and an observed run. `llmc run` reads and ignores "
     "this section, so a run's config plans as it is."},
};

std::string escapeCell(StringRef text) {
  std::string result;
  for (char c : text) {
    if (c == '|')
      result += "\\|";
    else
      result += c;
  }
  return result;
}
} // namespace

void mlir::llmc::printTrainingConfigHelp(raw_ostream &os) {
  os << "Config keys (YAML path; every key is also a flag that overrides the "
        "file; the plan: section is llmc plan's, which llmc run ignores; "
        "reference: docs/config-keys.md, `llmc help config`):\n";
  for (const KeyInfo &k : kKeys) {
    std::string flag = "--" + primaryFlag(k) + " " + k.values.str();
    os << formatv("  {0,-36} {1}\n", flag, k.path);
    os << formatv("  {0,-36}   {1}\n", "", helpOf(k));
  }
}

void mlir::llmc::printConfigKeyReference(raw_ostream &os) {
  os << "<!-- Generated by `llmc help config --markdown` from the key table "
        "of frontend/TrainConfigKeys.cpp; do not edit. -->\n"
        "# Config keys\n\n"
        "`llmc run CONFIG.yaml` and `llmc plan CONFIG.yaml` read the same "
        "keys: a YAML file\nof them, each also a flag that overrides the "
        "file (`--lr 3e-4`, `--tp 2`).\nKeys in a section are written "
        "`section: {key: value}` or as an indented\nmapping; their flag is "
        "the key's leaf where that is unique in the optimizer,\nschedule, "
        "data, parallel and plan sections (`--tp`), else the whole path\n"
        "(`--loss-scale-window`); both spellings are accepted. Paths in the "
        "file are\nrelative to it, paths in flags to the working "
        "directory.\n";
  for (const SectionDoc &section : kSectionDocs) {
    os << "\n## " << section.title << "\n\n" << section.about << "\n\n"
       << "| key | flag | value | what it does (default) |\n"
       << "|---|---|---|---|\n";
    for (const KeyInfo &k : kKeys) {
      if (sectionOf(k.path) != section.name)
        continue;
      os << "| `" << k.path << "` | `--" << primaryFlag(k) << "` | "
         << escapeCell(k.values) << " | " << escapeCell(helpOf(k)) << " |\n";
    }
  }
}
