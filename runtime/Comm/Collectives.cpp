// Collective steps on the mesh's communicators.
#include "runtime/Comm/Collectives.h"

#include "llvm/ADT/Twine.h"

#include <cstring>

using namespace llmc;
using namespace llmc::runtime;

comm::Communicator *Mesh::axis(llvm::StringRef name) const {
  auto it = axes.find(name);
  return it == axes.end() ? nullptr : it->second;
}

llvm::Error llmc::runtime::checkMesh(const kir::Program &program,
                                     const Mesh &mesh) {
  for (const kir::Step &step : program.steps) {
    if (step.kind != kir::StepKind::CollectiveStart)
      continue;
    const kir::CollectiveStep &c = step.collective;
    comm::Communicator *communicator = mesh.axis(c.axis);
    if (!communicator && c.axisSize == 1)
      continue;
    if (!communicator)
      return llvm::createStringError(
          "@" + program.function + " was compiled for " +
          llvm::Twine(c.axisSize) + " ranks on mesh axis '" + c.axis +
          "', but this process runs alone: start it with a launcher, e.g. "
          "mpirun -np " + llvm::Twine(c.axisSize));
    if (communicator->size() != c.axisSize)
      return llvm::createStringError(
          "@" + program.function + " was compiled for " +
          llvm::Twine(c.axisSize) + " ranks on mesh axis '" + c.axis +
          "', but the job has " + llvm::Twine(communicator->size()));
  }
  return llvm::Error::success();
}

static comm::ReduceOp reduceOp(kir::Reduction reduction) {
  switch (reduction) {
  case kir::Reduction::Sum:
    return comm::ReduceOp::Sum;
  case kir::Reduction::Avg:
    return comm::ReduceOp::Avg;
  case kir::Reduction::Max:
    return comm::ReduceOp::Max;
  }
  return comm::ReduceOp::Sum;
}

comm::Ticket llmc::runtime::startCollective(const Mesh &mesh,
                                            const kir::CollectiveStep &c,
                                            kir::DType dtype,
                                            const void *input, void *output) {
  comm::Communicator *communicator = mesh.axis(c.axis);
  if (!communicator && (c.kind == kir::CollectiveKind::Send ||
                        c.kind == kir::CollectiveKind::Recv)) {
    // checkMesh refuses a program with transfers and no pp axis.
    return 0;
  }
  if (!communicator) {
    // One rank: every collective is a copy.
    std::memcpy(output, input, size_t(c.count) * kir::dtypeBytes(dtype));
    return 0;
  }
  switch (c.kind) {
  case kir::CollectiveKind::AllReduce:
    return communicator->allReduce(input, output, c.count, dtype,
                                   reduceOp(c.reduction));
  case kir::CollectiveKind::ReduceScatter:
    return communicator->reduceScatter(input, output, c.outputCount(), dtype,
                                       reduceOp(c.reduction));
  case kir::CollectiveKind::AllGather:
    return communicator->allGather(input, output, c.count, dtype);
  case kir::CollectiveKind::Broadcast:
    // In place on the output: every rank copies its input there, and the
    // broadcast overwrites it on all ranks but the root.
    std::memcpy(output, input, size_t(c.count) * kir::dtypeBytes(dtype));
    return communicator->broadcast(output, c.count, dtype, int(c.root));
  case kir::CollectiveKind::Send:
    // The output is the stage's placeholder loss.
    *static_cast<float *>(output) = 0.0f;
    return communicator->send(input, c.count, dtype, int(c.root));
  case kir::CollectiveKind::Recv:
    return communicator->recv(output, c.count, dtype, int(c.root));
  }
  return 0;
}

llvm::Error llmc::runtime::waitCollective(const Mesh &mesh,
                                          const kir::CollectiveStep &c,
                                          comm::Ticket ticket) {
  comm::Communicator *communicator = mesh.axis(c.axis);
  if (!communicator || ticket == 0)
    return llvm::Error::success();
  return communicator->wait(ticket);
}
