// The device mesh: rank layout and the split into axis communicators.
#include "runtime/Comm/Mesh.h"

#include "llvm/Support/FormatVariadic.h"

using namespace llmc::runtime::comm;

MeshCoord llmc::runtime::comm::meshCoord(const MeshShape &shape,
                                         int worldRank) {
  MeshCoord c;
  c.tp = worldRank % shape.tp;
  c.dp = (worldRank / shape.tp) % shape.dp;
  c.pp = worldRank / (shape.tp * shape.dp);
  return c;
}

int llmc::runtime::comm::meshRank(const MeshShape &shape,
                                  const MeshCoord &coord) {
  return (coord.pp * shape.dp + coord.dp) * shape.tp + coord.tp;
}

llvm::Expected<MeshAxes>
llmc::runtime::comm::splitMesh(Communicator &world, const MeshShape &shape) {
  if (shape.dp < 1 || shape.tp < 1 || shape.pp < 1 ||
      shape.size() != world.size())
    return llvm::createStringError(llvm::formatv(
        "the mesh dp={0} x tp={1} x pp={2} has {3} ranks but the job has {4}",
        shape.dp, shape.tp, shape.pp, shape.size(), world.size()).str());
  MeshCoord me = meshCoord(shape, world.rank());
  MeshAxes axes;
  // Every rank takes part in every split (a split is a collective of the
  // world), even for an axis of one rank, which it then drops.
  struct Axis {
    const char *name;
    int size, color, key;
    std::unique_ptr<Communicator> *slot;
  } splits[] = {
      {"tp", shape.tp, me.pp * shape.dp + me.dp, me.tp, &axes.tp},
      {"dp", shape.dp, me.pp * shape.tp + me.tp, me.dp, &axes.dp},
      {"pp", shape.pp, me.dp * shape.tp + me.tp, me.pp, &axes.pp},
  };
  for (Axis &axis : splits) {
    if (axis.size == 1)
      continue; // the same on every rank: no rank splits
    llvm::Expected<std::unique_ptr<Communicator>> split =
        world.split(axis.color, axis.key, axis.name);
    if (!split)
      return split.takeError();
    *axis.slot = std::move(*split);
  }
  return std::move(axes);
}
