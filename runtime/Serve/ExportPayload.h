// The payload of an exported inference binary (`llmc export`): sections
// appended to the executable, found through a trailer at the end of the
// file, so that the binary ships as one file and maps its weights from
// itself.
//
// Layout, all integers little-endian:
//
//   [ELF executable][section][section]...[table][footer]
//   table:  one 56-byte entry per section: name (32 bytes, NUL-padded),
//           offset (u64, from the start of the file), size (u64),
//           checksum (u64, payloadChecksum of the section's bytes)
//   footer: 40 bytes: table offset (u64), section count (u32), format
//           version (u32), payloadChecksum of the table (u64), where the
//           payload starts (u64: the executable's size), magic "LLMCEXE1"
//
// Sections an exported binary holds: "manifest" (JSON, ExportManifest),
// "prefill" and "decode" (the programs as llmc artifacts, kernels not
// included: they are linked into the executable), for a CUDA binary
// "cuda.prefill" and "cuda.decode" (each program's cubins, PTX and
// launches: ir/kernel/CudaModule.h), "tokenizer.vocab" and
// "tokenizer.merges" (a GPT-2 BPE tokenizer's files; none for bytes) and
// "weights" (every parameter, page-aligned, each tensor at a 64-byte
// aligned offset the manifest gives).
#ifndef LLMC_RUNTIME_EXPORTPAYLOAD_H
#define LLMC_RUNTIME_EXPORTPAYLOAD_H

#include "ir/kernel/KernelIR.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llmc::runtime {

/// The payload format this llmc writes and the only one it reads.
constexpr uint32_t kPayloadVersion = 1;
constexpr llvm::StringLiteral kPayloadMagic = "LLMCEXE1";
constexpr uint64_t kPayloadFooterBytes = 40;
constexpr uint64_t kPayloadEntryBytes = 56;
constexpr uint64_t kPayloadNameBytes = 32;

/// xxh3-64 of each 16 MiB block of `bytes` (on several threads), then
/// xxh3-64 of those block hashes: the checksum of every section and of the
/// table. Hashing is far faster than reading the file, so start-up's cost
/// is the page faults.
uint64_t payloadChecksum(llvm::ArrayRef<uint8_t> bytes);

struct PayloadSection {
  std::string name;
  uint64_t offset = 0, size = 0, checksum = 0;
};

/// Appends sections to a stream that already holds `start` bytes (the
/// executable), then the table and footer.
class PayloadWriter {
public:
  PayloadWriter(llvm::raw_ostream &os, uint64_t start);
  /// Starts a section at the next multiple of `align` bytes of the file.
  void begin(llvm::StringRef name, uint64_t align = 64);
  void write(llvm::ArrayRef<char> bytes);
  /// Zero bytes up to the next multiple of `align` of the section's size.
  void pad(uint64_t align);
  /// Where the next byte of the current section goes, from its start.
  uint64_t sectionSize() const { return offset - current.offset; }
  void end();
  /// A whole section at once.
  void add(llvm::StringRef name, llvm::ArrayRef<char> bytes,
           uint64_t align = 64);
  /// The checksum a finished section got.
  uint64_t checksumOf(llvm::StringRef name) const;
  /// Writes the table and the footer.
  void finish();

private:
  void flushBlock();
  llvm::raw_ostream &os;
  uint64_t start, offset;
  PayloadSection current;
  bool open = false;
  std::vector<char> block;           // the current block of the section
  std::vector<uint64_t> blockHashes; // its finished blocks'
  std::vector<PayloadSection> sections;
};

/// An exported binary's file mapped read-only, its trailer and table
/// checked (bounds, names, the table's checksum). Sections are checked by
/// verify(). Every error names the file and, for a section, the section.
class Payload {
public:
  static llvm::Expected<std::unique_ptr<Payload>> open(llvm::StringRef path);
  /// Whether `path` ends with a payload trailer's magic (cheap: reads the
  /// last 8 bytes); false for any file that cannot be read.
  static bool isExported(llvm::StringRef path);
  ~Payload();

  const std::string &path() const { return file; }
  uint64_t fileSize() const { return bytes; }
  /// Where the payload starts: the size of the executable part.
  uint64_t payloadStart() const { return start; }
  const std::vector<PayloadSection> &sections() const { return table; }
  const PayloadSection *find(llvm::StringRef name) const;
  /// A section's bytes (in the mapping); an error naming it if absent.
  llvm::Expected<llvm::ArrayRef<char>> section(llvm::StringRef name) const;
  /// Checks every section's checksum; the first that differs is an error
  /// naming the file and the section.
  llvm::Error verify() const;

private:
  Payload() = default;
  std::string file;
  const char *data = nullptr;
  uint64_t bytes = 0, start = 0;
  std::vector<PayloadSection> table;
};

/// What the manifest section says: what the binary holds and needs.
struct ExportManifest {
  std::string llmcVersion; // llmc's git commit when it was built
  std::string modelName;
  std::string modelJson; // the model config (kir::Program::modelJson)
  std::string precision; // fp32 or bf16 (the parameters' storage)
  int64_t batch = 1, maxContext = 0, prefillChunk = 0;
  /// Where the programs run: "cpu" (kernels linked into the executable)
  /// or "cuda" (sections cuda.prefill and cuda.decode: the modules, as
  /// serializeCudaModules writes them; loaded on the GPU at run time).
  std::string target = "cpu";
  std::string cpu;                      // the LLVM CPU name compiled for
  std::vector<std::string> cpuFeatures; // required: "avx2", "fma", ...
  int64_t prefillKernels = 0, decodeKernels = 0;
  std::string tokenizer = "byte"; // or "gpt2-bpe" (two sections)
  struct Tensor {
    std::string name;
    kir::DType dtype = kir::DType::F32;
    std::vector<int64_t> shape;
    uint64_t offset = 0, bytes = 0; // in the weights section
  };
  std::vector<Tensor> weights;
  uint64_t weightsBytes = 0, weightsChecksum = 0;

  std::string toJson() const;
  /// `name` (the file and section) starts every error.
  static llvm::Expected<ExportManifest> parse(llvm::StringRef json,
                                              llvm::StringRef name);
};

/// The manifest of `payload`, parsed.
llvm::Expected<ExportManifest> readManifest(const Payload &payload);

/// The features of `required` that this CPU lacks (LLVM's names).
std::vector<std::string>
missingCpuFeatures(llvm::ArrayRef<std::string> required);

/// What an exported binary holds, for its --info and `llmc inspect`; the
/// caller has verified the payload (its last line says so).
void printExportInfo(const Payload &payload, const ExportManifest &manifest,
                     llvm::raw_ostream &os);

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_EXPORTPAYLOAD_H
