// Reading and writing llmc artifacts: a compiled kir::Program stored as a
// FlatBuffer (schema and layout in ir/kernel/llmc_artifact.fbs).
//
// A reader trusts nothing in the file: it checks the identifier, the size,
// the FlatBuffers structure, the format version, the checksum, every enum
// value and finally kir::verifyProgram, and names the file and what is wrong
// in every error.
#ifndef LLMC_IR_KERNEL_ARTIFACT_H
#define LLMC_IR_KERNEL_ARTIFACT_H

#include "ir/kernel/Program.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace llmc::kir {

/// The format version this llmc writes and the only one it reads. Bump it
/// on any change to ir/kernel/llmc_artifact.fbs or to what a field means.
/// 2: Random op, State buffers, states/updates bindings, attention and
/// embedding gradient steps; the optional CUDA section.
/// 3: accumulating GEMM and embedding gradient steps.
/// 4: the RoundF16 and RoundBF16 ops (casts to f16/bf16 inside kernels).
/// 5: initial values of State buffers (the loss scale).
/// 6: GEMM epilogue kinds and their bias and aux views.
/// 7: a library step's views as one list in kir::forEach*View's order.
/// 8: collective steps (all-reduce, reduce-scatter, all-gather, broadcast).
/// 9: GEMM steps' sparse_weight (B may run from a 2:4 copy).
/// 10: attention steps' kv_seq and positions (attention over a KV cache)
/// and stores at computed indices (the cache writes).
/// 11: bindings' step_scalar (the step's interface, ir/kernel/StepScalar.h)
/// and the program's adam_betas.
constexpr uint32_t kArtifactFormatVersion = 11;

/// The FlatBuffers file identifier (bytes 8-11 of a file) and the usual
/// file extension, without the dot.
constexpr llvm::StringLiteral kArtifactIdentifier = "LLMC";
constexpr llvm::StringLiteral kArtifactExtension = "llmc";

/// The CUDA section of an artifact (`llmc compile --target=cuda`): the
/// emitted CUDA module, its NVRTC binaries and each kernel's launch, as
/// codegen/KernelToCuda and codegen/KernelToCuda/Nvrtc produce them.
struct CudaSection {
  struct Launch {
    std::string kernel; // the program kernel's name
    int64_t grid[3] = {1, 1, 1};
    int block[3] = {1, 1, 1};
    int sharedBytes = 0, staticSharedBytes = 0;
  };
  struct Cubin {
    int arch = 0; // 80: sm_80
    std::vector<uint8_t> image;
  };
  int codegenVersion = 0;
  std::string source;
  std::vector<Cubin> cubins;
  std::string ptx;
  int ptxArch = 0;
  std::vector<Launch> launches; // one per program kernel, in order
};

/// Everything an artifact holds.
struct ArtifactContents {
  kir::Program program;
  std::optional<CudaSection> cuda;
};

/// Encodes `program` as the bytes of an artifact file, checksum included.
/// It does not verify the program (writeArtifact does), so tests can build
/// artifacts a reader must refuse.
std::vector<uint8_t> serializeProgram(const kir::Program &program);
/// The same with a CUDA section (none if `cuda` is null).
std::vector<uint8_t> serializeArtifact(const kir::Program &program,
                                       const CudaSection *cuda);

/// Decodes and checks the bytes of an artifact file; `name` (a path, or a
/// description for bytes that did not come from a file) starts every error.
llvm::Expected<kir::Program>
deserializeProgram(llvm::ArrayRef<uint8_t> bytes,
                   llvm::StringRef name = "<memory>");

/// deserializeProgram that also returns the CUDA section, if any, checked
/// against the program (one launch per kernel, by name).
llvm::Expected<ArtifactContents>
deserializeArtifact(llvm::ArrayRef<uint8_t> bytes,
                    llvm::StringRef name = "<memory>");

/// Writes `program` to `path` atomically: a temporary file next to it is
/// written, flushed to disk and renamed over `path`, so readers see the old
/// file or the new one, never a partial one, and a failure leaves `path` as
/// it was and no temporary file behind. Refuses a program that fails
/// kir::verifyProgram.
llvm::Error writeArtifact(llvm::StringRef path, const kir::Program &program,
                          const CudaSection *cuda = nullptr);

/// Reads and checks the artifact at `path` (see deserializeProgram).
llvm::Expected<kir::Program> readArtifact(llvm::StringRef path);
/// The same with the CUDA section (see deserializeArtifact).
llvm::Expected<ArtifactContents> readArtifactContents(llvm::StringRef path);

} // namespace llmc::kir

#endif // LLMC_IR_KERNEL_ARTIFACT_H
