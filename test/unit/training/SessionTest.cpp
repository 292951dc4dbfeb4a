// The training session API (training/Session.h) as the tests and benches
// call it: the tiny model of examples/train-tiny.yaml trained a few steps,
// its loss falling, and a run resumed from a checkpoint that ends with the
// same tensors, bit for bit, as the run that went straight through.
#include "training/Session.h"

#include "runtime/Weights/Checkpoint.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace llmc;

namespace {

/// A fresh directory under the system's temporary one.
std::string scratchDir(llvm::StringRef name) {
  llvm::SmallString<128> dir;
  std::error_code ec = llvm::sys::fs::createUniqueDirectory(name, dir);
  EXPECT_FALSE(ec) << ec.message();
  return std::string(dir);
}

/// The tiny model's config for a short run into `out`: every step logged,
/// a checkpoint every 4 steps, no evaluation or samples.
mlir::llmc::TrainingConfig tinyConfig(const std::string &out,
                                      int64_t maxSteps) {
  // clang-format off
  std::vector<std::string> flags = {
      "--max-steps", std::to_string(maxSteps), "--warmup-steps", "2",
      "--log-interval", "1", "--eval-interval", "0", "--eval-steps", "0",
      "--sample-tokens", "0", "--checkpoint-interval", "4",
      "--progress", "lines", "--out", out};
  // clang-format on
  llvm::Expected<mlir::llmc::TrainingConfig> config =
      mlir::llmc::loadTrainingConfig(
          LLMC_SOURCE_DIR "/examples/train-tiny.yaml", flags);
  if (!config) {
    ADD_FAILURE() << llvm::toString(config.takeError());
    return {};
  }
  return std::move(*config);
}

/// One process's layout, resolved for `config`.
training::Layout singleProcess(mlir::llmc::TrainingConfig &config) {
  llvm::Expected<training::Layout> layout = training::openWorld(config);
  EXPECT_TRUE(bool(layout));
  if (!layout) {
    llvm::consumeError(layout.takeError());
    return {};
  }
  EXPECT_FALSE(bool(training::resolveMesh(config, *layout)));
  EXPECT_FALSE(bool(training::splitMesh(config, *layout)));
  return std::move(*layout);
}

/// Trains `config` through a session (resuming from `resume` when set);
/// the logged training losses.
std::vector<double> train(mlir::llmc::TrainingConfig config,
                          const std::string &resume = "") {
  training::Layout layout = singleProcess(config);
  training::SessionOptions options;
  options.resume.path = resume;
  options.log = &llvm::nulls();
  llvm::Expected<std::unique_ptr<training::Session>> session =
      training::Session::create(config, layout, options);
  if (!session) {
    ADD_FAILURE() << llvm::toString(session.takeError());
    return {};
  }
  if (llvm::Error err = (*session)->run()) {
    ADD_FAILURE() << llvm::toString(std::move(err));
    return {};
  }
  EXPECT_EQ((*session)->step(), config.maxSteps);
  EXPECT_EQ((*session)->stopSignal(), 0);
  std::vector<double> losses;
  for (const runtime::MetricPoint &point : (*session)->trainLosses())
    losses.push_back(point.value);
  return losses;
}

std::string checkpointFile(const std::string &out, int64_t step) {
  llvm::SmallString<256> path(out);
  llvm::sys::path::append(path, "checkpoints",
                          runtime::checkpointFileName(step));
  return std::string(path);
}

TEST(SessionTest, TrainsTheTinyModelAndResumesBitwise) {
  std::string straight = scratchDir("llmc-session-straight");
  std::vector<double> losses = train(tinyConfig(straight, 8));
  ASSERT_EQ(losses.size(), 8u);
  // The untrained byte model starts near ln(256); eight steps bring it
  // down.
  EXPECT_LT(losses.back(), losses.front() - 0.3);

  // Resumed at step 4 into another directory: the same last 4 losses and
  // the same tensors at step 8, bit for bit.
  std::string resumed = scratchDir("llmc-session-resumed");
  std::vector<double> rest =
      train(tinyConfig(resumed, 8), checkpointFile(straight, 4));
  ASSERT_EQ(rest.size(), 4u);
  for (size_t i = 0; i < rest.size(); ++i)
    EXPECT_EQ(rest[i], losses[4 + i]) << "step " << 4 + i;

  llvm::Expected<runtime::Checkpoint> a =
      runtime::readCheckpoint(checkpointFile(straight, 8));
  llvm::Expected<runtime::Checkpoint> b =
      runtime::readCheckpoint(checkpointFile(resumed, 8));
  ASSERT_TRUE(bool(a)) << llvm::toString(a.takeError());
  ASSERT_TRUE(bool(b)) << llvm::toString(b.takeError());
  EXPECT_EQ(a->step, 8);
  EXPECT_EQ(a->consumedTokens, b->consumedTokens);
  EXPECT_EQ(a->loaderPosition, b->loaderPosition);
  ASSERT_EQ(a->tensors.size(), b->tensors.size());
  for (const auto &[name, tensor] : a->tensors) {
    auto other = b->tensors.find(name);
    ASSERT_NE(other, b->tensors.end()) << name;
    EXPECT_TRUE(tensor.bytes == other->second.bytes) << name;
  }
  llvm::sys::fs::remove_directories(straight);
  llvm::sys::fs::remove_directories(resumed);
}

TEST(SessionTest, RefusesAFreshRunIntoADirectoryWithCheckpoints) {
  std::string out = scratchDir("llmc-session-twice");
  ASSERT_EQ(train(tinyConfig(out, 1)).size(), 1u);
  mlir::llmc::TrainingConfig config = tinyConfig(out, 1);
  training::Layout layout = singleProcess(config);
  training::SessionOptions options;
  options.log = &llvm::nulls();
  llvm::Expected<std::unique_ptr<training::Session>> session =
      training::Session::create(config, layout, options);
  ASSERT_FALSE(bool(session));
  EXPECT_NE(llvm::toString(session.takeError())
                .find("already holds "
                      "checkpoints"),
            std::string::npos);
  llvm::sys::fs::remove_directories(out);
}

} // namespace
