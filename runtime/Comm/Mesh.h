// The device mesh of a training job: named axes dp, tp and pp over the
// world's ranks, laid out tp-fastest as Megatron-LM does, and one
// communicator per axis split from the world.
#ifndef LLMC_RUNTIME_COMM_MESH_H
#define LLMC_RUNTIME_COMM_MESH_H

#include "runtime/Comm/Communicator.h"

#include <memory>

namespace llmc::runtime::comm {

/// The sizes of the mesh's axes; the world has dp * tp * pp ranks.
struct MeshShape {
  int dp = 1, tp = 1, pp = 1;
  int size() const { return dp * tp * pp; }
};

/// A rank's place on each axis.
struct MeshCoord {
  int dp = 0, tp = 0, pp = 0;
};

/// World rank (pp * dp_size + dp) * tp_size + tp: the tp ranks of a group
/// are neighbours (one node's GPUs, NVLink), dp next, pp outermost.
MeshCoord meshCoord(const MeshShape &shape, int worldRank);
int meshRank(const MeshShape &shape, const MeshCoord &coord);

/// One communicator per axis of more than one rank (null otherwise); each
/// holds the ranks that agree on the other two axes, ordered by their
/// place on this one.
struct MeshAxes {
  std::unique_ptr<Communicator> dp, tp, pp;
};

/// Splits `world` (of shape.size() ranks: an error otherwise) into the
/// axes' communicators. Every rank of the world calls it.
llvm::Expected<MeshAxes> splitMesh(Communicator &world, const MeshShape &shape);

} // namespace llmc::runtime::comm

#endif // LLMC_RUNTIME_COMM_MESH_H
