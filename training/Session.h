// The training session: the API `llmc run`, the tests and the benches
// train through. A session is made from a training config and the layout
// of the ranks; create() does everything before the first step (data, the
// checkpoint to resume from, the programs compiled for this rank, the
// executors, the weights, OUT made ready), run() trains, and the trainer's
// state, losses and checkpoints can be read after.
//
//   training::Layout layout = ...openWorld(config), resolveMesh, splitMesh;
//   auto session = training::Session::create(config, layout, options);
//   (*session)->run();
#ifndef LLMC_TRAINING_SESSION_H
#define LLMC_TRAINING_SESSION_H

#include "frontend/ModelInfo.h"
#include "frontend/TrainConfig.h"
#include "runtime/Train/Console.h"
#include "runtime/Train/Trainer.h"
#include "training/Checkpointing.h"
#include "training/SessionData.h"
#include "training/Devices.h"
#include "training/Layout.h"
#include "training/Programs.h"
#include "training/StartupTimings.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <memory>
#include <optional>

namespace llmc::training {

/// What a session is asked besides its config.
struct SessionOptions {
  ResumeRequest resume;
  /// The start-up clock (`llmc run --timings`); null: the session's own.
  StartupTimings *timings = nullptr;
  /// Asked at every step boundary: a signal number stops the run there
  /// with a checkpoint (TrainerOptions::stopRequested).
  std::function<int()> stopRequested;
  /// Test hooks (TrainerOptions::beforeStep, injectFault).
  std::function<void(int64_t)> beforeStep;
  std::function<llvm::Error(int64_t, runtime::TensorStore &, double &)>
      injectFault;
  /// The memory table and the 2:4 statistics of a dense model at the end
  /// of the run (`llmc run --report memory`); off: one summary line.
  bool reportMemory = false;
  /// `--data-trace DIR`: each rank appends the training windows it reads
  /// to DIR/rank-R.tsv (training/SessionData.h); empty: no trace.
  std::string dataTraceDir;
  /// Where rank 0's progress lines go; null: stdout (with a live status
  /// line on a terminal, as the config's `progress` says).
  llvm::raw_ostream *log = nullptr;
};

class Session {
public:
  /// Prepares a run of `config` on `layout` (resolved: resolveMesh and
  /// splitMesh done). Nothing is written to OUT before everything is
  /// checked: the data, the checkpoint and the compiled programs.
  static llvm::Expected<std::unique_ptr<Session>>
  create(TrainingConfig config, Layout &layout, SessionOptions options);
  ~Session();

  /// Trains until max_steps, or until a stop is asked for (stopSignal()).
  llvm::Error run();
  /// The validation loss now (NaN without validation data).
  llvm::Expected<double> evaluate();
  /// The state a checkpoint of the current step holds.
  llvm::Expected<runtime::Checkpoint> checkpoint() const;

  int64_t step() const { return trainer->step(); }
  /// The signal that stopped run() early, 0 if none.
  int stopSignal() const { return trainer->stopSignal(); }
  /// The logged training losses and the evaluations of the run so far.
  const std::vector<runtime::MetricPoint> &trainLosses() const {
    return trainer->trainLosses();
  }
  const std::vector<runtime::MetricPoint> &valLosses() const {
    return trainer->valLosses();
  }
  const TrainingConfig &config() const { return cfg; }
  /// The checkpoint file of the current step (what a stop wrote).
  std::string checkpointPath() const;

private:
  Session(TrainingConfig config, Layout &layout, SessionOptions options);
  llvm::Error prepare();
  llvm::Error openDeviceAndMesh();
  llvm::Error buildTrainingStep();
  llvm::Error makeStepExecutors();
  llvm::Error makeEvalExecutors();
  llvm::Error initializeWeights();
  llvm::Error makeTrainer();
  runtime::TrainerOptions trainerOptions();
  llvm::Error setUpMfu(runtime::TrainerOptions &options);
  runtime::TrainerPrograms trainerPrograms();
  void logRunSummary();
  /// Where the session's progress lines go (rank 0's; SessionOptions::log).
  llvm::raw_ostream &out() const {
    return options.log && layout.rank == 0 ? *options.log : layout.out();
  }

  TrainingConfig cfg;
  Layout &layout;
  SessionOptions options;
  StartupTimings ownTimings;
  StartupTimings &timings;
  runtime::MemoryPhases memoryPhases;
  TrainingData data;
  ResumePoint resume;
  mlir::MLIRContext context;
  std::shared_ptr<llvm::SourceMgr> sourceMgr;
  std::unique_ptr<mlir::SourceMgrDiagnosticHandler> diagnostics;
  std::unique_ptr<ModelSource> source;
  Device device;
  std::unique_ptr<runtime::comm::Communicator> deviceDp, deviceTp;
  TrainingStepOptions training;
  mlir::llmc::ModelInfo info;
  std::vector<std::string> ppTiedParams;
  std::map<std::string, runtime::TpShard> tpShards;
  std::optional<TrainingStepPrograms> programs;
  std::unique_ptr<runtime::Executor> grad, update, pipelineForward, eval,
      sampler;
  std::optional<runtime::TensorMap> initialParams;
  std::unique_ptr<runtime::StatusConsole> console;
  int remeasurePeakThreads = 0; // > 0: measure the sgemm peak at the end
  std::unique_ptr<runtime::Trainer> trainer;
};

} // namespace llmc::training

#endif // LLMC_TRAINING_SESSION_H
