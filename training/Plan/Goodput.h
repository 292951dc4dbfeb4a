// `llmc plan`'s checkpoints and run overheads: what a checkpoint weighs,
// how much disk a run's checkpoints take, and the goodput of a run that
// restarts (checkpoint writes, re-launch and reload, work lost since the
// last checkpoint), set against an observed run's wall-clock time.
#ifndef LLMC_CODEGEN_PLAN_GOODPUT_H
#define LLMC_CODEGEN_PLAN_GOODPUT_H

#include "training/Plan/Estimate.h"

#include <cstdint>

namespace mlir::llmc::plan {

/// One checkpoint of a run as llmc run writes it (runtime/Train/Trainer.cpp):
/// the f32 weights (under mixed precision the masters) and the optimizer
/// states. Not the gradients (zero between steps), not mixed precision's
/// 16-bit copies (made again from the masters on resume), not ZeRO's f32
/// partitions of fp32 weights (cut again from the weights).
struct CheckpointSize {
  double bytesPerParameter = 0; // f32 weights + optimizer states
  double bytes = 0;             // of the whole model
  /// The most one rank writes. ZeRO over data parallelism alone: every dp
  /// rank writes its blocks and rank 0 also the main file (ZeRO-1/2: the
  /// full f32 weights; ZeRO-3: only scalars). Otherwise one rank writes
  /// the whole checkpoint: tensor-parallel shares and pipeline stages,
  /// and under them ZeRO's blocks, are gathered into one file.
  double perRankBytes = 0;
  int64_t writers = 1; // ranks that write a part
};
CheckpointSize checkpointSize(const StateBytes &perParameter,
                              double parameters, const Layout &layout);

/// Checkpoints written over `steps` steps at one every `interval` steps
/// (0: only at the end), the last at the end: ceil(steps / interval).
int64_t checkpointCount(double steps, int64_t interval);

/// What the goodput model takes: the run's steps and its time per step,
/// checkpoints and restarts.
struct GoodputInputs {
  double steps = 0;
  double stepSeconds = 0;
  double checkpointBytes = 0;
  int64_t checkpointInterval = 0; // 0: only at the end
  double writeBytesPerSecond = 0; // aggregate, to storage
  double readBytesPerSecond = 0;  // aggregate, from storage
  int64_t restarts = 0;
  double relaunchSeconds = 0; // per restart, before the reload
};

/// The wall-clock time of a run, by what it is spent on. A failure comes
/// on average half a checkpoint interval after the last checkpoint, so
/// each restart redoes that much work (OPT-175B's logbook: a restart
/// resumes from the last checkpoint); checkpoints are written
/// synchronously, all ranks waiting.
struct Goodput {
  double trainingSeconds = 0;   // steps x step time: the useful work
  int64_t checkpoints = 0;      // written over the run
  double checkpointWriteSeconds = 0; // one checkpoint
  double checkpointSeconds = 0; // all of them
  double relaunchSeconds = 0;   // restarts x re-launch
  double reloadSeconds = 0;     // restarts x checkpoint / read bandwidth
  double lostWorkSeconds = 0;   // restarts x interval / 2 x step time
  double overheadSeconds() const {
    return checkpointSeconds + relaunchSeconds + reloadSeconds +
           lostWorkSeconds;
  }
  double wallSeconds() const { return trainingSeconds + overheadSeconds(); }
  /// The fraction of the wall-clock time that trains: useful / wall.
  double goodput() const {
    return wallSeconds() > 0 ? trainingSeconds / wallSeconds() : 1;
  }
};
Goodput computeGoodput(const GoodputInputs &inputs);

/// An observed run against the plan.
struct ObservedRun {
  bool fromDays = false;      // wall-clock days given, else a step time
  double observed = 0;        // wall-clock seconds, or seconds per step
  double impliedMfu = 0;      // model FLOPs / (observed x GPUs x peak)
  double ideal = 0;           // the plan's: time to train, or step time
  double gap = 0;             // observed - ideal
  double explained = 0;       // the goodput model's overheads
  double unexplained = 0;     // gap - explained (wall-clock days only)
};
/// `flops` are the model FLOPs of the whole run (days) or of one step
/// (step time); `peakFlops` a GPU's; `ideal` the plan's time for the same
/// work; `overheads` the goodput model's (wall-clock days only).
ObservedRun compareObserved(bool fromDays, double observedSeconds,
                            double flops, double gpus, double peakFlops,
                            double ideal, double overheads);

} // namespace mlir::llmc::plan

#endif // LLMC_CODEGEN_PLAN_GOODPUT_H
