// `llmc plan`'s checkpoints, run overheads and observed-run comparison.
#include "training/Plan/Goodput.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace mlir::llmc;
using namespace mlir::llmc::plan;

CheckpointSize plan::checkpointSize(const StateBytes &perParameter,
                                    double parameters, const Layout &layout) {
  CheckpointSize size;
  double f32Weights =
      perParameter.master > 0 ? perParameter.master : perParameter.weights;
  size.bytesPerParameter = f32Weights + perParameter.optimizer;
  size.bytes = parameters * size.bytesPerParameter;
  bool rankFiles = layout.zero >= 1 && layout.dp > 1 && layout.tp == 1 &&
                   layout.pp == 1;
  double d = static_cast<double>(layout.dp);
  size.writers = rankFiles ? layout.dp : 1;
  if (!rankFiles)
    size.perRankBytes = size.bytes;
  else if (layout.zero >= 3)
    size.perRankBytes = size.bytes / d;
  else
    size.perRankBytes = parameters * (f32Weights + perParameter.optimizer / d);
  return size;
}

int64_t plan::checkpointCount(double steps, int64_t interval) {
  if (steps <= 0)
    return 0;
  if (interval <= 0)
    return 1;
  return static_cast<int64_t>(std::ceil(steps / static_cast<double>(interval)));
}

Goodput plan::computeGoodput(const GoodputInputs &in) {
  Goodput g;
  g.trainingSeconds = in.steps * in.stepSeconds;
  g.checkpoints = checkpointCount(in.steps, in.checkpointInterval);
  g.checkpointWriteSeconds =
      in.writeBytesPerSecond > 0 ? in.checkpointBytes / in.writeBytesPerSecond
                                 : 0;
  g.checkpointSeconds = g.checkpoints * g.checkpointWriteSeconds;
  double restarts = static_cast<double>(in.restarts);
  g.relaunchSeconds = restarts * in.relaunchSeconds;
  double read = in.readBytesPerSecond > 0 ? in.readBytesPerSecond
                                          : in.writeBytesPerSecond;
  g.reloadSeconds = read > 0 ? restarts * in.checkpointBytes / read : 0;
  // Without intermediate checkpoints a failure loses the run so far.
  double interval = in.checkpointInterval > 0
                        ? std::min<double>(in.checkpointInterval, in.steps)
                        : in.steps;
  g.lostWorkSeconds = restarts * interval / 2 * in.stepSeconds;
  return g;
}

ObservedRun plan::compareObserved(bool fromDays, double observedSeconds,
                                  double flops, double gpus, double peakFlops,
                                  double ideal, double overheads) {
  ObservedRun run;
  run.fromDays = fromDays;
  run.observed = observedSeconds;
  run.impliedMfu = flops / (observedSeconds * gpus * peakFlops);
  run.ideal = ideal;
  run.gap = observedSeconds - ideal;
  if (fromDays) {
    run.explained = overheads;
    run.unexplained = run.gap - overheads;
  }
  return run;
}
