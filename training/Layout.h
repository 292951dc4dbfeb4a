// The ranks of a session and how they are laid out: the world (one process
// or a launcher's), the mesh dp x tp x pp it is cut into, and one
// communicator per mesh axis of more than one rank.
#ifndef LLMC_TRAINING_LAYOUT_H
#define LLMC_TRAINING_LAYOUT_H

#include "frontend/TrainConfig.h"
#include "runtime/Comm/Communicator.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>

namespace llmc::training {

using mlir::llmc::TrainingConfig;

struct Layout {
  std::unique_ptr<runtime::comm::Communicator> world;
  runtime::comm::CommOptions commOptions;
  int rank = 0, worldSize = 1;
  /// Null on an axis of one rank.
  std::unique_ptr<runtime::comm::Communicator> dp, tp, pp;
  /// Pipeline parallelism: the first and the last stage, which share the
  /// tied parameters' gradients; null on the other stages.
  std::unique_ptr<runtime::comm::Communicator> ppTied;
  /// Where progress lines go: stdout on rank 0, nowhere on the others.
  llvm::raw_ostream &out() const {
    return rank == 0 ? llvm::outs() : llvm::nulls();
  }
};

/// The world of the job: one process, or a launcher's (mpirun, srun).
llvm::Expected<Layout> openWorld(const TrainingConfig &config);

/// Fits the config's mesh to the world: checks dp x tp x pp against the
/// world size (dp defaults to what tp and pp leave) and what the layout
/// does not compose with yet.
llvm::Error resolveMesh(TrainingConfig &config, const Layout &layout);

/// Every rank must train the same thing: the resolved configs' hashes are
/// compared; then the mesh is logged and cut into its axes' communicators.
llvm::Error splitMesh(const TrainingConfig &config, Layout &layout);

} // namespace llmc::training

#endif // LLMC_TRAINING_LAYOUT_H
