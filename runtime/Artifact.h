// Reading and writing llmc artifacts: a compiled kir::Program stored as a
// FlatBuffer (schema and layout in runtime/llmc_artifact.fbs).
//
// A reader trusts nothing in the file: it checks the identifier, the size,
// the FlatBuffers structure, the format version, the checksum, every enum
// value and finally kir::verifyProgram, and names the file and what is wrong
// in every error.
#ifndef LLMC_RUNTIME_ARTIFACT_H
#define LLMC_RUNTIME_ARTIFACT_H

#include "codegen/Program.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <vector>

namespace llmc::runtime {

/// The format version this llmc writes and the only one it reads. Bump it
/// on any change to runtime/llmc_artifact.fbs or to what a field means.
constexpr uint32_t kArtifactFormatVersion = 1;

/// The FlatBuffers file identifier (bytes 8-11 of a file) and the usual
/// file extension, without the dot.
constexpr llvm::StringLiteral kArtifactIdentifier = "LLMC";
constexpr llvm::StringLiteral kArtifactExtension = "llmc";

/// Encodes `program` as the bytes of an artifact file, checksum included.
/// It does not verify the program (writeArtifact does), so tests can build
/// artifacts a reader must refuse.
std::vector<uint8_t> serializeProgram(const kir::Program &program);

/// Decodes and checks the bytes of an artifact file; `name` (a path, or a
/// description for bytes that did not come from a file) starts every error.
llvm::Expected<kir::Program>
deserializeProgram(llvm::ArrayRef<uint8_t> bytes,
                   llvm::StringRef name = "<memory>");

/// Writes `program` to `path` atomically: a temporary file next to it is
/// written, flushed to disk and renamed over `path`, so readers see the old
/// file or the new one, never a partial one, and a failure leaves `path` as
/// it was and no temporary file behind. Refuses a program that fails
/// kir::verifyProgram.
llvm::Error writeArtifact(llvm::StringRef path, const kir::Program &program);

/// Reads and checks the artifact at `path` (see deserializeProgram).
llvm::Expected<kir::Program> readArtifact(llvm::StringRef path);

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_ARTIFACT_H
