// The training guard of `llmc run`: detects loss spikes, exploding gradient
// norms and non-finite values step by step, and keeps the state that decides
// what happens next (rollbacks in a row, the learning-rate cooldown, the data
// windows skipped). The trainer (runtime/Train/Trainer.cpp) acts on its verdicts:
// it logs them, stops, or rolls back to its last in-memory snapshot. The
// state a resumed run needs is saved in checkpoints as JSON, so that a run
// resumed after a rollback continues bitwise as the uninterrupted one.
#ifndef LLMC_RUNTIME_TRAININGGUARD_H
#define LLMC_RUNTIME_TRAININGGUARD_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

namespace llmc::runtime {

/// What the guard does on an event. `Off` and `Warn` still stop on a
/// non-finite loss or gradient norm: training through NaN or inf only
/// trains on garbage.
enum class GuardAction { Off, Warn, Stop, Rollback };

llvm::StringRef stringifyGuardAction(GuardAction action);

/// A loss or norm as the guard's messages show it: 3.1416, 5.7369e+18,
/// nan, inf.
std::string formatGuardValue(double value);
std::optional<GuardAction> parseGuardAction(llvm::StringRef name);

/// The guard's settings (the `guard:` section of the training config; its
/// schema holds the defaults and their reasons).
struct GuardOptions {
  GuardAction action = GuardAction::Warn;
  /// Steps of loss (and gradient norm) history the statistics run over;
  /// nothing is judged a spike before the window is full.
  int64_t window = 50;
  /// A loss above mean + zscore * sd of the window is a spike (0: off).
  double zscore = 6;
  /// A loss above ratio * mean of the window is a spike (0: off).
  double ratio = 0;
  /// A gradient norm above this times the window's median is a spike
  /// (0: off).
  double maxGradNormRatio = 0;
  /// Rollback: steps between in-memory snapshots (checkpoints are
  /// snapshots too).
  int64_t snapshotInterval = 50;
  /// Rollback: the learning rate is multiplied by lrFactor for `cooldown`
  /// steps (0: for the rest of the run).
  double lrFactor = 0.5;
  int64_t cooldown = 100;
  /// Rollback: more rollbacks than this in a row without a clean window
  /// stop the run.
  int64_t maxRollbacks = 3;
};

/// An event the guard found in a step.
struct GuardEvent {
  enum class Kind {
    NonFinite, // the loss or gradient norm is NaN or inf
    LossSpike, // zscore or ratio
    GradSpike, // maxGradNormRatio
  };
  Kind kind = Kind::LossSpike;
  /// For people: "loss 9.1234 > mean 3.2100 + 6 sd (0.0500)".
  std::string reason;
};

/// The guard's state: the statistics windows and the counters of its
/// actions. Everything here is in checkpoints (toJson / fromJson).
struct GuardState {
  std::deque<double> losses;    // the last `window` clean losses
  std::deque<double> gradNorms; // the last `window` finite clean norms
  int64_t rollbacks = 0;        // in the run
  int64_t rollbacksInARow = 0;  // since the last clean window
  int64_t lastEventStep = -1;   // the step that triggered the last rollback
  double lrFactor = 1;          // applied to the schedule's learning rate
  int64_t cooldownLeft = 0;     // steps until lrFactor returns to 1
  int64_t skippedBatches = 0;   // micro-batches skipped by rollbacks
  int64_t warnings = 0;         // spikes logged by action warn

  bool isDefault() const;
  std::string toJson() const;
  static llvm::Expected<GuardState> fromJson(llvm::StringRef text);
};

class TrainingGuard {
public:
  explicit TrainingGuard(GuardOptions options) : options(options) {}

  const GuardOptions &settings() const { return options; }
  GuardState &state() { return current; }
  const GuardState &state() const { return current; }

  /// Judges a finished step: its loss and gradient norm, and whether the
  /// loss scaler skipped it for an overflow (whose inf norm is the
  /// scaler's business, not an event).
  std::optional<GuardEvent> check(double loss, double gradNorm,
                                  bool overflowSkipped) const;

  /// Adds a step that was not an event (or only warned about) to the
  /// windows, counts down the cooldown and, once the run is past the step
  /// of the last rollback, ends the rollbacks in a row.
  void recordClean(int64_t step, double loss, double gradNorm,
                   bool overflowSkipped);

  /// Whether a rollback is allowed (fewer than maxRollbacks in a row).
  bool mayRollBack() const {
    return current.rollbacksInARow < options.maxRollbacks;
  }

  /// Records a rollback of the event at `eventStep`, `batches` micro-batches
  /// skipped: the windows come back as `windows` (the snapshot's), the
  /// learning rate is lowered and the cooldown starts over.
  void recordRollback(int64_t eventStep, int64_t batches,
                      const GuardState &windows);

private:
  GuardOptions options;
  GuardState current;
};

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_TRAININGGUARD_H
