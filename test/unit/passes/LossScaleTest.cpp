// Dynamic loss scaling (passes/LossScaling.cpp) on the CPU, with the tiny
// GPT of test/golden/gpt2_c36_h4_v101_b2_t13 (2 layers, C 36, V 101; B 2,
// T 13, two micro-batches a step) trained in f32 with AdamW. f32 needs no
// loss scaling, which makes it the reference: a power-of-two scale changes
// no bit of the unscaled gradients, so training with loss scaling must
// equal training without it bitwise, and an injected overflow must leave
// exactly its step out. Then the scale's rules (DeepSpeed's
// DynamicLossScaler) and the Trainer's side: a skipped update does not
// advance Adam's step count, an overflow at the minimum scale stops the
// run without a checkpoint, and a resumed run continues exactly.
#include "test/unit/codegen/LlmcToKernel/CompileUtil.h"
#ifdef LLMC_LOSSSCALE_CUDA
#include "test/unit/codegen/KernelToCuda/EmulationRunner.h"
#include "codegen/KernelToCuda/KernelToCuda.h"
#include "codegen/KernelToCuda/Nvrtc.h"
#endif

#include "frontend/ModelConfig.h"
#include "runtime/Train/Trainer.h"
#include "runtime/Weights/Checkpoint.h"
#include "runtime/Weights/Weights.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <tuple>

using namespace llmc;
using runtime::HostTensor;
using ::testing::HasSubstr;

namespace {

constexpr int64_t kVocab = 101;
constexpr double kLr = 1e-3, kBeta1 = 0.9, kBeta2 = 0.95;

std::string goldenBase() {
  return std::string(LLMC_SOURCE_DIR) + "/test/golden/gpt2_c36_h4_v101_b2_t13";
}

/// The golden file's parameters, tokens and targets.
const runtime::TensorMap &golden() {
  static runtime::TensorMap tensors = [] {
    auto file = runtime::readSafetensorsFile(goldenBase() + ".safetensors");
    if (!file) {
      ADD_FAILURE() << llvm::toString(file.takeError());
      return runtime::TensorMap();
    }
    return file->tensors;
  }();
  return tensors;
}

/// Micro-batch `index`: the golden ids shifted by 7 * index (mod V), so
/// that every micro-batch differs.
HostTensor microBatch(llvm::StringRef name, int64_t index) {
  HostTensor ids = golden().at(name.str());
  for (int32_t &id : ids.i32())
    id = int32_t((id + 7 * index) % kVocab);
  return ids;
}

mlir::llmc::LossScalingPassOptions scaling(int64_t window, int64_t hysteresis,
                                           double power = 16,
                                           double minScale = 1) {
  mlir::llmc::LossScalingPassOptions options;
  options.initialScalePower = power;
  options.window = window;
  options.hysteresis = hysteresis;
  options.minScale = minScale;
  return options;
}

struct Programs {
  kir::Program grad, update;
};

/// @grad_step and @update_step of the tiny GPT through the training
/// pipeline (AdamW, clipping at 1.0), with llmc-loss-scaling if `options`.
std::optional<Programs>
compile(std::optional<mlir::llmc::LossScalingPassOptions> options) {
  mlir::MLIRContext context;
  context.loadDialect<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  auto config = mlir::llmc::loadModelConfigFile(goldenBase() + ".yaml");
  if (!config) {
    ADD_FAILURE() << llvm::toString(config.takeError());
    return std::nullopt;
  }
  auto module = mlir::llmc::buildForwardModule(context, *config, {2, 13});
  if (!module) {
    ADD_FAILURE() << llvm::toString(module.takeError());
    return std::nullopt;
  }
  mlir::PassManager pm(&context);
  mlir::llmc::TrainingPipelineOptions pipeline;
  pipeline.lossScaling = options;
  mlir::llmc::buildTrainingPipeline(pm, pipeline);
  if (mlir::failed(pm.run(**module))) {
    ADD_FAILURE() << "the training pipeline failed";
    return std::nullopt;
  }
  Programs programs;
  for (auto [name, program] :
       {std::pair<const char *, kir::Program *>{"grad_step", &programs.grad},
        {"update_step", &programs.update}}) {
    auto func = (**module).lookupSymbol<mlir::func::FuncOp>(name);
    mlir::FailureOr<kir::Program> lowered = mlir::llmc::lowerToProgram(func);
    if (mlir::failed(lowered)) {
      ADD_FAILURE() << "cannot lower @" << name;
      return std::nullopt;
    }
    *program = std::move(*lowered);
  }
  return programs;
}

void expectOk(llvm::Error error) {
  EXPECT_FALSE(bool(error)) << llvm::toString(std::move(error));
}

/// The grad and update executors of one run over one store, the parameters
/// set to the golden ones.
struct StepRun {
  std::shared_ptr<runtime::PersistentStore> store =
      std::make_shared<runtime::PersistentStore>();
  std::unique_ptr<runtime::CpuExecutor> grad, update;

  static std::optional<StepRun> start(const Programs &programs) {
    StepRun run;
    auto grad = test::makeExecutor(programs.grad, 2, run.store);
    auto update = test::makeExecutor(programs.update, 2, run.store);
    if (!grad || !update) {
      ADD_FAILURE() << (grad ? llvm::toString(update.takeError())
                             : llvm::toString(grad.takeError()));
      if (grad)
        llvm::consumeError(update.takeError());
      return std::nullopt;
    }
    run.grad = std::move(*grad);
    run.update = std::move(*update);
    expectOk(run.grad->setParams(golden(), goldenBase()));
    return run;
  }

  /// The two micro-batches of data step `index` (dloss 1/2 each); with
  /// `overflow`, the first one's dloss is +inf.
  void gradients(int64_t index, bool overflow = false) {
    for (int64_t m = 0; m < 2; ++m) {
      expectOk(grad->setTensor("tokens", microBatch("tokens", 2 * index + m)));
      expectOk(
          grad->setTensor("targets", microBatch("targets", 2 * index + m)));
      float dloss =
          overflow && m == 0 ? std::numeric_limits<float>::infinity() : 0.5f;
      expectOk(grad->setTensor("dloss", HostTensor::fromF32({dloss}, {})));
      expectOk(grad->run());
    }
  }

  /// The AdamW update with Adam's step count `t`.
  void step(int64_t t) {
    for (auto [name, value] :
         {std::pair<const char *, double>{"lr", kLr},
          {"bias_correction1", 1 / (1 - std::pow(kBeta1, double(t)))},
          {"bias_correction2", 1 / (1 - std::pow(kBeta2, double(t)))}})
      expectOk(
          update->setTensor(name, HostTensor::fromF32({float(value)}, {})));
    expectOk(update->run());
  }

  HostTensor stored(llvm::StringRef name) const {
    llvm::Expected<HostTensor> tensor = store->get(name);
    if (!tensor) {
      ADD_FAILURE() << llvm::toString(tensor.takeError());
      return HostTensor();
    }
    return *tensor;
  }
  double scalar(llvm::StringRef name) const { return stored(name).f32()[0]; }
  double output(llvm::StringRef name) const {
    llvm::Expected<HostTensor> tensor = update->output(name);
    if (!tensor) {
      ADD_FAILURE() << llvm::toString(tensor.takeError());
      return NAN;
    }
    return tensor->f32()[0];
  }

  /// Parameters and optimizer moments (not gradients, not the scale).
  std::vector<std::string> trainedTensors() const {
    std::vector<std::string> names;
    for (const std::string &name : store->names())
      if (!llvm::StringRef(name).starts_with("grad.") &&
          !llvm::StringRef(name).starts_with("loss_scale"))
        names.push_back(name);
    return names;
  }
};

/// Every gradient buffer of `run` holds zeros.
void expectZeroGradients(const StepRun &run, const std::string &when) {
  for (const kir::Binding &param : run.grad->program().params) {
    HostTensor grad = run.stored("grad." + param.name);
    for (float g : grad.f32())
      ASSERT_EQ(g, 0.0f) << "grad." << param.name << " " << when;
  }
}

/// Every parameter and moment of `a` equals `b`'s, bit for bit.
void expectSameTensors(const StepRun &a, const StepRun &b,
                       const std::string &when) {
  std::vector<std::string> names = a.trainedTensors();
  ASSERT_EQ(names, b.trainedTensors());
  EXPECT_GT(names.size(), 3 * 20u); // params, adam_m, adam_v
  for (const std::string &name : names)
    EXPECT_TRUE(a.stored(name) == b.stored(name)) << name << " " << when;
}

/// A snapshot of every parameter and moment.
std::map<std::string, HostTensor> snapshot(const StepRun &run) {
  std::map<std::string, HostTensor> tensors;
  for (const std::string &name : run.trainedTensors())
    tensors[name] = run.stored(name);
  return tensors;
}

//===----------------------------------------------------------------------===//
// Initial values of persistent tensors
//===----------------------------------------------------------------------===//

TEST(PersistentStoreTest, TheFirstBindFillsTheInitialValue) {
  runtime::PersistentStore store;
  for (auto [name, dtype, value] :
       {std::tuple<const char *, kir::DType, double>{"f32", kir::DType::F32,
                                                     65536.0},
        {"f16", kir::DType::F16, 65504.0},
        {"bf16", kir::DType::BF16, -3.0},
        {"zeros", kir::DType::F32, 0.0}}) {
    ASSERT_TRUE(bool(store.bind(name, dtype, {3, 5}, value)));
    HostTensor tensor = *store.get(name);
    for (float x : tensor.toF32())
      ASSERT_EQ(x, float(value)) << name;
  }
  ASSERT_TRUE(bool(store.bind("i32", kir::DType::I32, {2}, 7)));
  HostTensor ids = *store.get("i32");
  EXPECT_EQ(ids.i32()[0], 7);
  EXPECT_EQ(ids.i32()[1], 7);
  // A later bind finds the tensor as it is.
  expectOk(store.set(
      "f32", HostTensor::fromF32(std::vector<float>(15, 1.0f), {3, 5})));
  ASSERT_TRUE(bool(store.bind("f32", kir::DType::F32, {3, 5}, 2.0)));
  EXPECT_EQ(store.get("f32")->f32()[0], 1.0f);
}

//===----------------------------------------------------------------------===//
// The compiled step
//===----------------------------------------------------------------------===//

TEST(LossScaleTest, F32TrainingEqualsTrainingWithoutScalingBitwise) {
  std::optional<Programs> plain = compile(std::nullopt);
  std::optional<Programs> scaled = compile(scaling(/*window=*/2, 2));
  ASSERT_TRUE(plain && scaled);
  std::optional<StepRun> a = StepRun::start(*plain),
                         b = StepRun::start(*scaled);
  ASSERT_TRUE(a && b);
  double scale = 65536;
  EXPECT_EQ(b->scalar("loss_scale"), scale); // the state's initial value
  EXPECT_EQ(b->scalar("loss_scale.hysteresis"), 2);
  for (int64_t step = 0; step < 6; ++step) {
    std::string when = "at step " + std::to_string(step);
    a->gradients(step);
    b->gradients(step);
    // The accumulated gradients carry the scale exactly.
    size_t compared = 0;
    for (const kir::Binding &param : a->grad->program().params) {
      HostTensor plainGrad = a->stored("grad." + param.name);
      HostTensor scaledGrad = b->stored("grad." + param.name);
      ASSERT_EQ(plainGrad.f32().size(), scaledGrad.f32().size());
      for (size_t i = 0; i < plainGrad.f32().size(); ++i)
        ASSERT_EQ(scaledGrad.f32()[i], float(plainGrad.f32()[i] * scale))
            << "grad." << param.name << "[" << i << "] " << when;
      ++compared;
    }
    EXPECT_EQ(compared, 28u);
    a->step(step + 1);
    b->step(step + 1);
    EXPECT_EQ(a->output("grad_norm"), b->output("grad_norm")) << when;
    EXPECT_EQ(b->output("overflow"), 0) << when;
    EXPECT_EQ(b->output("used_loss_scale"), scale) << when;
    expectSameTensors(*a, *b, when);
    // Two clean steps in a row double the scale.
    if (step % 2 == 1)
      scale *= 2;
    EXPECT_EQ(b->scalar("loss_scale"), scale) << when;
    EXPECT_EQ(b->scalar("loss_scale.clean_steps"), (step + 1) % 2) << when;
    EXPECT_EQ(b->scalar("loss_scale.skipped_steps"), 0) << when;
    expectZeroGradients(*b, when);
  }
}

TEST(LossScaleTest, AnOverflowSkipsExactlyItsStepAndHalvesTheScale) {
  std::optional<Programs> plain = compile(std::nullopt);
  std::optional<Programs> scaled = compile(scaling(1000, /*hysteresis=*/1));
  ASSERT_TRUE(plain && scaled);
  std::optional<StepRun> a = StepRun::start(*plain),
                         b = StepRun::start(*scaled);
  ASSERT_TRUE(a && b);
  for (int64_t step = 0; step < 2; ++step) {
    a->gradients(step);
    a->step(step + 1);
    b->gradients(step);
    b->step(step + 1);
  }
  expectSameTensors(*a, *b, "before the overflow");

  // Step 2 overflows: nothing it computed reaches the parameters or the
  // moments; the gradients are zeroed for the next step.
  std::map<std::string, HostTensor> before = snapshot(*b);
  b->gradients(2, /*overflow=*/true);
  b->step(3);
  EXPECT_FALSE(std::isfinite(b->output("grad_norm")));
  EXPECT_EQ(b->output("overflow"), 1);
  EXPECT_EQ(b->output("used_loss_scale"), 65536);
  for (const auto &[name, tensor] : before)
    EXPECT_TRUE(b->stored(name) == tensor) << name << " changed";
  expectZeroGradients(*b, "after the overflow");
  EXPECT_EQ(b->scalar("loss_scale"), 32768);
  EXPECT_EQ(b->scalar("loss_scale.hysteresis"), 1);
  EXPECT_EQ(b->scalar("loss_scale.clean_steps"), 0);
  EXPECT_EQ(b->scalar("loss_scale.skipped_steps"), 1);

  // The next step proceeds at the lower scale, as if step 2 never was
  // (Adam's t is 3 for both: the skipped update does not count).
  a->gradients(3);
  a->step(3);
  b->gradients(3);
  b->step(3);
  EXPECT_EQ(b->output("overflow"), 0);
  EXPECT_EQ(b->output("used_loss_scale"), 32768);
  expectSameTensors(*a, *b, "after the step that follows the overflow");
}

TEST(LossScaleTest, HysteresisDelaysTheDropAndWindowRaisesTheScale) {
  std::optional<Programs> scaled = compile(scaling(/*window=*/2, 2));
  ASSERT_TRUE(scaled);
  std::optional<StepRun> b = StepRun::start(*scaled);
  ASSERT_TRUE(b);
  struct Expected {
    bool overflow;
    double scale, hysteresis, clean, skipped;
  };
  // DeepSpeed's rules with hysteresis 2 and window 2: the first overflow
  // only uses up hysteresis, the second halves the scale; two clean steps
  // double it and refill the hysteresis.
  const Expected steps[] = {
      {true, 65536, 1, 0, 1},  {true, 32768, 1, 0, 2}, {false, 32768, 1, 1, 2},
      {false, 65536, 2, 0, 2}, {true, 65536, 1, 0, 3}, {false, 65536, 1, 1, 3},
  };
  for (auto [index, want] : llvm::enumerate(steps)) {
    std::string when = "after step " + std::to_string(index);
    b->gradients(int64_t(index), want.overflow);
    b->step(1);
    EXPECT_EQ(b->output("overflow"), want.overflow ? 1 : 0) << when;
    EXPECT_EQ(b->scalar("loss_scale"), want.scale) << when;
    EXPECT_EQ(b->scalar("loss_scale.hysteresis"), want.hysteresis) << when;
    EXPECT_EQ(b->scalar("loss_scale.clean_steps"), want.clean) << when;
    EXPECT_EQ(b->scalar("loss_scale.skipped_steps"), want.skipped) << when;
  }
}

TEST(LossScaleTest, ConsecutiveHysteresisRefillsAfterEveryCleanStep) {
  mlir::llmc::LossScalingPassOptions options = scaling(1000, 2);
  options.consecutiveHysteresis = true;
  std::optional<Programs> scaled = compile(options);
  ASSERT_TRUE(scaled);
  std::optional<StepRun> b = StepRun::start(*scaled);
  ASSERT_TRUE(b);
  b->gradients(0, /*overflow=*/true);
  b->step(1);
  EXPECT_EQ(b->scalar("loss_scale.hysteresis"), 1);
  b->gradients(1);
  b->step(1);
  EXPECT_EQ(b->scalar("loss_scale.hysteresis"), 2);
  b->gradients(2, /*overflow=*/true);
  b->step(1);
  EXPECT_EQ(b->scalar("loss_scale"), 65536); // hysteresis again
}

TEST(LossScaleTest, TheScaleStopsAtTheMinimum) {
  std::optional<Programs> scaled =
      compile(scaling(1000, 1, /*power=*/2, /*minScale=*/1.5));
  ASSERT_TRUE(scaled);
  std::optional<StepRun> b = StepRun::start(*scaled);
  ASSERT_TRUE(b);
  for (double want : {2.0, 1.5, 1.5}) {
    b->gradients(0, /*overflow=*/true);
    b->step(1);
    EXPECT_EQ(b->scalar("loss_scale"), want);
  }
}

//===----------------------------------------------------------------------===//
// The Trainer
//===----------------------------------------------------------------------===//

/// A Trainer over a fresh store, with the golden micro-batches as data;
/// the first micro-batch of each step in `overflowSteps` finds +inf in a
/// gradient buffer (as an fp16 overflow would leave it).
struct TrainerRun {
  std::shared_ptr<runtime::PersistentStore> store =
      std::make_shared<runtime::PersistentStore>();
  int64_t position = 0; // micro-batches read
  std::set<int64_t> overflowSteps;
  std::string logText;
  llvm::raw_string_ostream log{logText};
  std::unique_ptr<runtime::Trainer> trainer;

  bool init(const Programs &programs, const std::string &outDir,
            int64_t maxSteps, int64_t checkpointInterval) {
    if (std::error_code ec = llvm::sys::fs::create_directories(outDir)) {
      ADD_FAILURE() << outDir << ": " << ec.message();
      return false;
    }
    auto grad = test::makeExecutor(programs.grad, 2, store);
    auto update = test::makeExecutor(programs.update, 2, store);
    if (!grad || !update) {
      ADD_FAILURE() << (grad ? llvm::toString(update.takeError())
                             : llvm::toString(grad.takeError()));
      if (grad)
        llvm::consumeError(update.takeError());
      return false;
    }
    expectOk((*grad)->setParams(golden(), goldenBase()));

    runtime::TrainerOptions options;
    options.stepShape = [](int64_t, int64_t) {
      return runtime::StepShape{/*globalBatch=*/4, /*seqLen=*/13};
    };
    options.learningRate = [](int64_t) { return kLr; };
    options.microBatch = 2;
    options.maxGlobalBatch = 4;
    options.seed = 1337;
    options.maxSteps = maxSteps;
    options.logInterval = 1000;
    options.checkpointInterval = checkpointInterval;
    options.outDir = outDir;
    options.configSections = {{"model", "tiny\n"}};
    options.log = &log;

    runtime::TrainerData data;
    data.next = [this](int64_t, int64_t, int64_t,
                       std::vector<int32_t> &tokens,
                       std::vector<int32_t> &targets) -> llvm::Error {
      int64_t index = position++;
      HostTensor t = microBatch("tokens", index);
      HostTensor y = microBatch("targets", index);
      tokens.assign(t.i32().begin(), t.i32().end());
      targets.assign(y.i32().begin(), y.i32().end());
      if (index % 2 == 0 && overflowSteps.count(index / 2))
        poisonAGradient();
      return llvm::Error::success();
    };
    data.savePosition = [this] { return std::to_string(position); };
    data.restorePosition = [this](llvm::StringRef text) {
      position = std::stoll(text.str());
      return llvm::Error::success();
    };

    runtime::TrainerPrograms trainerPrograms;
    auto first =
        std::make_shared<std::unique_ptr<runtime::Executor>>(std::move(*grad));
    trainerPrograms.gradStepFor =
        [first](int64_t, bool) -> llvm::Expected<std::unique_ptr<runtime::Executor>> {
      return std::move(*first);
    };
    trainerPrograms.updateStep = std::move(*update);
    trainer = std::make_unique<runtime::Trainer>(
        std::move(options), std::move(trainerPrograms), std::move(data), store);
    return true;
  }

  void poisonAGradient() {
    HostTensor grad = *store->get("grad.wte");
    grad.f32()[0] = std::numeric_limits<float>::infinity();
    expectOk(store->set("grad.wte", grad));
  }
};

class LossScaleTrainerTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("llmc-lossscale", dir));
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }

  /// `dir/name`, or `dir` itself for an empty name.
  std::string path(llvm::StringRef name = "") const {
    llvm::SmallString<256> p(dir);
    if (!name.empty())
      llvm::sys::path::append(p, name);
    return std::string(p);
  }

  llvm::SmallString<256> dir;
};

TEST_F(LossScaleTrainerTest, ASkippedStepDoesNotAdvanceAdamsStepCount) {
  std::optional<Programs> plain = compile(std::nullopt);
  std::optional<Programs> scaled = compile(scaling(1000, /*hysteresis=*/1));
  ASSERT_TRUE(plain && scaled);
  TrainerRun run;
  run.overflowSteps = {1};
  ASSERT_TRUE(run.init(*scaled, path(), /*maxSteps=*/4, 0));
  expectOk(run.trainer->run());
  EXPECT_THAT(run.logText, HasSubstr("step 1: gradient overflow, update "
                                     "skipped, loss scale 65536 -> 32768\n"));

  // The same data without step 1's, updated with t = 1, 2, 3.
  std::optional<StepRun> reference = StepRun::start(*plain);
  ASSERT_TRUE(reference);
  int64_t t = 0;
  for (int64_t step : {0, 2, 3}) {
    reference->gradients(step);
    reference->step(++t);
  }
  StepRun trained;
  trained.store = run.store;
  for (const std::string &name : reference->trainedTensors())
    EXPECT_TRUE(reference->stored(name) == trained.stored(name)) << name;

  // metrics.jsonl logs the skipped step with the scale it used, and counts.
  auto file = llvm::MemoryBuffer::getFile(path("metrics.jsonl"));
  ASSERT_TRUE(bool(file));
  llvm::SmallVector<llvm::StringRef> lines;
  (*file)->getBuffer().split(lines, '\n', -1, false);
  std::map<int64_t, std::pair<double, int64_t>> logged; // scale, skipped
  for (llvm::StringRef line : lines) {
    llvm::Expected<llvm::json::Value> json = llvm::json::parse(line);
    ASSERT_TRUE(bool(json))
        << llvm::toString(json.takeError()) << ": " << line.str();
    const llvm::json::Object *object = json->getAsObject();
    if (!object->get("loss"))
      continue;
    logged[*object->getInteger("step")] = {*object->getNumber("loss_scale"),
                                           *object->getInteger("skipped")};
  }
  EXPECT_EQ(logged[0], std::make_pair(65536.0, int64_t(0)));
  EXPECT_EQ(logged[1], std::make_pair(65536.0, int64_t(1)));
  EXPECT_EQ(logged[3], std::make_pair(32768.0, int64_t(1)));
}

TEST_F(LossScaleTrainerTest, AnOverflowAtTheMinimumScaleStopsTheRun) {
  std::optional<Programs> scaled =
      compile(scaling(1000, /*hysteresis=*/1, /*power=*/0, /*minScale=*/1));
  ASSERT_TRUE(scaled);
  TrainerRun run;
  run.overflowSteps = {2};
  ASSERT_TRUE(run.init(*scaled, path(), /*maxSteps=*/4, 1));
  llvm::Error error = run.trainer->run();
  ASSERT_TRUE(bool(error));
  EXPECT_THAT(llvm::toString(std::move(error)),
              HasSubstr("fp16 training diverged: gradients overflow at the "
                        "minimum loss scale 1 (step 2); the update was "
                        "skipped and no checkpoint is written"));
  // Steps 0 and 1 were checkpointed, step 2 not.
  std::vector<std::string> checkpoints =
      runtime::listCheckpoints(path("checkpoints"));
  ASSERT_EQ(checkpoints.size(), 2u);
  EXPECT_THAT(checkpoints[1], HasSubstr(runtime::checkpointFileName(2)));
}

TEST_F(LossScaleTrainerTest, HysteresisAtTheMinimumScaleAllowsOneOverflow) {
  std::optional<Programs> scaled =
      compile(scaling(1000, /*hysteresis=*/2, /*power=*/0, /*minScale=*/1));
  ASSERT_TRUE(scaled);
  TrainerRun run;
  run.overflowSteps = {1, 2};
  ASSERT_TRUE(run.init(*scaled, path(), /*maxSteps=*/4, 0));
  llvm::Error error = run.trainer->run();
  ASSERT_TRUE(bool(error));
  EXPECT_THAT(llvm::toString(std::move(error)),
              HasSubstr("at the minimum loss scale 1 (step 2)"));
  EXPECT_THAT(run.logText, HasSubstr("step 1: gradient overflow, update "
                                     "skipped, loss scale 1 kept "
                                     "(hysteresis 2 -> 1)\n"));
}

TEST_F(LossScaleTrainerTest, AResumedRunContinuesExactly) {
  std::optional<Programs> scaled = compile(scaling(/*window=*/2, 1));
  ASSERT_TRUE(scaled);
  // Uninterrupted: an overflow at step 1, the scale back up at step 3.
  TrainerRun whole;
  whole.overflowSteps = {1};
  ASSERT_TRUE(whole.init(*scaled, path("whole"), /*maxSteps=*/5, 2));
  expectOk(whole.trainer->run());
  EXPECT_EQ(whole.store->get("loss_scale")->f32()[0], 65536.0f);
  EXPECT_EQ(whole.store->get("loss_scale.skipped_steps")->f32()[0], 1.0f);

  // From the checkpoint of step 2 (after the overflow), in a fresh store.
  llvm::Expected<runtime::Checkpoint> checkpoint = runtime::readCheckpoint(
      path("whole/checkpoints/" + runtime::checkpointFileName(2)));
  ASSERT_TRUE(bool(checkpoint)) << llvm::toString(checkpoint.takeError());
  EXPECT_TRUE(checkpoint->tensors.count("loss_scale"));
  EXPECT_TRUE(checkpoint->tensors.count("loss_scale.skipped_steps"));
  TrainerRun resumed;
  ASSERT_TRUE(resumed.init(*scaled, path("resumed"), /*maxSteps=*/5, 2));
  expectOk(resumed.trainer->resume(*checkpoint, "step 2"));
  expectOk(resumed.trainer->run());

  std::vector<std::string> names = whole.store->names();
  ASSERT_EQ(names, resumed.store->names());
  for (const std::string &name : names)
    EXPECT_TRUE(*whole.store->get(name) == *resumed.store->get(name)) << name;
}

#ifdef LLMC_LOSSSCALE_CUDA
//===----------------------------------------------------------------------===//
// The CUDA emitter
//===----------------------------------------------------------------------===//

/// Runs every step of `program` (kernels only) under CUDA emulation on host
/// buffers: Param, State and Input buffers from `tensors` by name, the
/// arena zeroed. Returns the persistent buffers afterwards, by name.
std::map<std::string, HostTensor>
runEmulated(const kir::Program &program, const test::EmulatedModule &module,
            const std::map<std::string, HostTensor> &tensors) {
  std::vector<std::vector<double>> owned(program.buffers.size());
  std::vector<double> arena(program.arenaBytes / sizeof(double) + 1, 0.0);
  std::vector<char *> bases(program.buffers.size());
  for (auto [index, buffer] : llvm::enumerate(program.buffers)) {
    if (buffer.kind == kir::BufferKind::Arena) {
      bases[index] = reinterpret_cast<char *>(arena.data()) + buffer.offset;
      continue;
    }
    owned[index].assign(buffer.bytes() / sizeof(double) + 1, 0.0);
    bases[index] = reinterpret_cast<char *>(owned[index].data());
    auto it = tensors.find(buffer.name);
    if (it == tensors.end()) {
      ADD_FAILURE() << "no value for " << buffer.name;
      continue;
    }
    std::memcpy(bases[index], it->second.bytes.data(), buffer.bytes());
  }
  for (const kir::Step &step : program.steps) {
    if (step.kind != kir::StepKind::Kernel) {
      ADD_FAILURE() << "the update step has a library step: " << step.origin;
      return {};
    }
    const kir::Kernel &kernel = program.kernels[step.kernel];
    std::vector<void *> operands;
    for (const kir::Access &access : kernel.operands)
      operands.push_back(bases[access.buffer]);
    module.run(kernel.name, operands);
  }
  std::map<std::string, HostTensor> result;
  for (auto [index, buffer] : llvm::enumerate(program.buffers)) {
    if (!kir::isPersistent(buffer.kind))
      continue;
    HostTensor tensor = HostTensor::zeros(buffer.dtype, buffer.shape);
    std::memcpy(tensor.bytes.data(), bases[index], buffer.bytes());
    result[buffer.name] = tensor;
  }
  return result;
}

TEST(LossScaleCudaTest, TheStepCompilesWithNvrtcAndMatchesTheCpuEmulated) {
  std::optional<Programs> scaled = compile(scaling(/*window=*/2, 1));
  ASSERT_TRUE(scaled);
  std::string why;
  if (cuda::nvrtcAvailable(&why)) {
    for (const kir::Program *program : {&scaled->grad, &scaled->update}) {
      cuda::NvrtcOptions options;
      options.cacheEnabled = false;
      auto binaries = cuda::compileCuda(cuda::emitCudaModule(*program),
                                        program->function + ".cu", options);
      ASSERT_TRUE(bool(binaries)) << llvm::toString(binaries.takeError());
      for (const kir::Kernel &kernel : program->kernels)
        EXPECT_NE(binaries->ptx.find(".entry " + kernel.name),
                  std::string::npos)
            << kernel.name;
    }
  } else {
    std::printf("[ nvrtc    ] skipped: %s\n", why.c_str());
  }

  // The update step's kernels, emulated, against the CPU executor: on a
  // clean step and on an overflow (is_finite, compare and select as the
  // CUDA emitter writes them).
  std::string error;
  auto module = test::EmulatedModule::build(scaled->update.kernels, error);
  ASSERT_TRUE(module) << error;
  for (bool overflow : {false, true}) {
    SCOPED_TRACE(overflow ? "overflow" : "clean");
    std::optional<StepRun> cpu = StepRun::start(*scaled);
    ASSERT_TRUE(cpu);
    cpu->gradients(0, overflow);
    std::map<std::string, HostTensor> before;
    for (const std::string &name : cpu->store->names())
      before[name] = cpu->stored(name);
    cpu->step(1);
    for (const char *input : {"lr", "bias_correction1", "bias_correction2"})
      before[input] = *cpu->update->output(input);
    std::map<std::string, HostTensor> emulated =
        runEmulated(scaled->update, *module, before);
    for (const auto &[name, tensor] : emulated) {
      HostTensor want = cpu->stored(name);
      ASSERT_EQ(want.f32().size(), tensor.f32().size()) << name;
      for (size_t i = 0; i < want.f32().size(); ++i) {
        float w = want.f32()[i], g = tensor.f32()[i];
        // The loss scale, the flags' effects and kept values are exact;
        // computed values within a few ulp (the emitters' math differs).
        if (overflow || llvm::StringRef(name).starts_with("loss_scale"))
          ASSERT_EQ(w, g) << name << "[" << i << "]";
        else
          ASSERT_NEAR(w, g, 1e-6 * std::max(1.0f, std::fabs(w)))
              << name << "[" << i << "]";
      }
    }
    EXPECT_EQ(emulated.at("loss_scale").f32()[0], overflow ? 32768 : 65536);
  }
}
#endif // LLMC_LOSSSCALE_CUDA

} // namespace
