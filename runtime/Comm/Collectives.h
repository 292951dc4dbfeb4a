// The program's collective steps (kir::CollectiveStep) on the communicators
// of the device mesh (runtime/Comm): which communicator runs a step, and the
// call that starts it. Executors use these for CollectiveStart and
// CollectiveWait steps on any backend.
#ifndef LLMC_RUNTIME_COLLECTIVES_H
#define LLMC_RUNTIME_COLLECTIVES_H

#include "ir/kernel/Program.h"
#include "runtime/Comm/Communicator.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <map>
#include <string>

namespace llmc::runtime {

/// The communicators of the mesh axes ("dp", "tp", "pp"), by name; the
/// caller owns them and keeps them alive while executors use them.
struct Mesh {
  std::map<std::string, comm::Communicator *, std::less<>> axes;

  /// The communicator of `axis`, or null.
  comm::Communicator *axis(llvm::StringRef name) const;
};

/// Checks that every collective of `program` has its axis in `mesh` with
/// the size it was compiled for; an axis of size 1 needs none (a copy runs).
/// The error says how to launch the program when an axis is missing.
llvm::Error checkMesh(const kir::Program &program, const Mesh &mesh);

/// Starts `step` on `mesh` (checked by checkMesh): `input` and `output`
/// are the addresses of its views' first elements. An axis of size 1
/// without a communicator copies and returns ticket 0 (nothing to wait for).
comm::Ticket startCollective(const Mesh &mesh, const kir::CollectiveStep &step,
                             kir::DType dtype, const void *input,
                             void *output);

/// Completes a collective started by startCollective.
llvm::Error waitCollective(const Mesh &mesh, const kir::CollectiveStep &step,
                           comm::Ticket ticket);

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_COLLECTIVES_H
