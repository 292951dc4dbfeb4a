// CudaBinaries::imageFor: which compiled image a GPU loads; the table of a
// multi-tensor launch; CudaModules to bytes and back.
#include "ir/kernel/CudaModule.h"
#include "ir/kernel/Program.h"

#include "llvm/Support/FormatVariadic.h"

#include <cstring>

using namespace llmc::cuda;

llvm::Expected<CudaImage> CudaBinaries::imageFor(int cc) const {
  const Cubin *best = nullptr;
  for (const Cubin &cubin : cubins)
    if (cubin.arch / 10 == cc / 10 && cubin.arch <= cc &&
        (!best || cubin.arch > best->arch))
      best = &cubin;
  if (best)
    return CudaImage{best->bytes.data(), best->bytes.size(), false, best->arch};
  if (!ptx.empty() && ptxArch <= cc)
    return CudaImage{ptx.c_str(), ptx.size() + 1, true, ptxArch};
  std::string held;
  for (const Cubin &cubin : cubins)
    held += "sm_" + std::to_string(cubin.arch) + " ";
  if (!ptx.empty())
    held += "compute_" + std::to_string(ptxArch) + " PTX";
  return llvm::createStringError(llvm::formatv(
      "no CUDA binary for compute capability {0}.{1}: the module holds {2}",
      cc / 10, cc % 10, held.empty() ? "nothing" : held));
}

// The byte format, little-endian as the host writes it (x86-64 and the
// GPUs' hosts): "LLMCCUDA", a u32 version, then
//   binaries:  u32 cubins, per cubin {i32 arch, u64 size, bytes},
//              u64 PTX size, PTX bytes, i32 PTX arch
//   launch:    i64 grid[3], i32 block[3], i32 shared, i32 static shared
//   modules:   binaries (kernels), u32 launches, launch..., u8 hasLibrary,
//              binaries (library), u32 steps, per step {u32 kernels, per
//              kernel {u32 name size, name, launch}}
namespace {

constexpr char kModulesMagic[8] = {'L', 'L', 'M', 'C', 'C', 'U', 'D', 'A'};
constexpr uint32_t kModulesVersion = 1;

struct Writer {
  std::vector<char> bytes;
  template <typename T> void put(T value) {
    const char *p = reinterpret_cast<const char *>(&value);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  void put(const void *data, size_t size) {
    const char *p = static_cast<const char *>(data);
    bytes.insert(bytes.end(), p, p + size);
  }
  void binaries(const CudaBinaries &b) {
    put(uint32_t(b.cubins.size()));
    for (const Cubin &cubin : b.cubins) {
      put(int32_t(cubin.arch));
      put(uint64_t(cubin.bytes.size()));
      put(cubin.bytes.data(), cubin.bytes.size());
    }
    put(uint64_t(b.ptx.size()));
    put(b.ptx.data(), b.ptx.size());
    put(int32_t(b.ptxArch));
  }
  void launch(const CudaLaunch &l) {
    for (int64_t g : l.grid)
      put(g);
    for (int b : l.block)
      put(int32_t(b));
    put(int32_t(l.sharedBytes));
    put(int32_t(l.staticSharedBytes));
  }
};

struct Reader {
  llvm::ArrayRef<char> bytes;
  size_t at = 0;
  bool ok = true;
  bool take(void *out, size_t size) {
    if (!ok || bytes.size() - at < size)
      return ok = false;
    if (size == 0)
      return true;
    std::memcpy(out, bytes.data() + at, size);
    at += size;
    return true;
  }
  template <typename T> T get() {
    T value{};
    take(&value, sizeof(T));
    return value;
  }
  /// A count of items of at least `itemBytes` each that the rest can hold.
  uint64_t count(uint64_t raw, uint64_t itemBytes) {
    if (raw > (bytes.size() - at) / std::max<uint64_t>(itemBytes, 1))
      ok = false;
    return ok ? raw : 0;
  }
  void binaries(CudaBinaries &b) {
    b.cubins.resize(count(get<uint32_t>(), 12));
    for (Cubin &cubin : b.cubins) {
      cubin.arch = get<int32_t>();
      cubin.bytes.resize(count(get<uint64_t>(), 1));
      take(cubin.bytes.data(), cubin.bytes.size());
    }
    b.ptx.resize(count(get<uint64_t>(), 1));
    take(b.ptx.data(), b.ptx.size());
    b.ptxArch = get<int32_t>();
  }
  void launch(CudaLaunch &l) {
    for (int64_t &g : l.grid)
      g = get<int64_t>();
    for (int &b : l.block)
      b = get<int32_t>();
    l.sharedBytes = get<int32_t>();
    l.staticSharedBytes = get<int32_t>();
  }
};

constexpr uint64_t kLaunchBytes = 3 * 8 + 3 * 4 + 2 * 4;

} // namespace

std::vector<char> llmc::cuda::serializeCudaModules(const CudaModules &modules) {
  Writer w;
  w.put(kModulesMagic, sizeof(kModulesMagic));
  w.put(kModulesVersion);
  w.binaries(modules.kernels);
  w.put(uint32_t(modules.kernelLaunches.size()));
  for (const CudaLaunch &launch : modules.kernelLaunches)
    w.launch(launch);
  w.put(uint8_t(modules.hasLibrary));
  w.binaries(modules.library);
  w.put(uint32_t(modules.stepKernels.size()));
  for (const std::vector<LibraryKernel> &step : modules.stepKernels) {
    w.put(uint32_t(step.size()));
    for (const LibraryKernel &kernel : step) {
      w.put(uint32_t(kernel.name.size()));
      w.put(kernel.name.data(), kernel.name.size());
      w.launch(kernel.launch);
    }
  }
  return std::move(w.bytes);
}

llvm::Expected<CudaModules>
llmc::cuda::deserializeCudaModules(llvm::ArrayRef<char> bytes,
                                   llvm::StringRef name) {
  Reader r{bytes};
  char magic[sizeof(kModulesMagic)];
  if (!r.take(magic, sizeof(magic)) ||
      std::memcmp(magic, kModulesMagic, sizeof(magic)) != 0)
    return llvm::createStringError(name + ": not CUDA modules (no " +
                                   "LLMCCUDA magic)");
  uint32_t version = r.get<uint32_t>();
  if (r.ok && version != kModulesVersion)
    return llvm::createStringError(
        llvm::formatv("{0}: CUDA modules of format {1}; this llmc reads {2}",
                      name, version, kModulesVersion));
  CudaModules modules;
  modules.kernelsPrecompiled = true;
  r.binaries(modules.kernels);
  modules.kernelLaunches.resize(r.count(r.get<uint32_t>(), kLaunchBytes));
  for (CudaLaunch &launch : modules.kernelLaunches)
    r.launch(launch);
  modules.hasLibrary = r.get<uint8_t>() != 0;
  r.binaries(modules.library);
  modules.stepKernels.resize(r.count(r.get<uint32_t>(), 4));
  for (std::vector<LibraryKernel> &step : modules.stepKernels) {
    step.resize(r.count(r.get<uint32_t>(), 4 + kLaunchBytes));
    for (LibraryKernel &kernel : step) {
      kernel.name.resize(r.count(r.get<uint32_t>(), 1));
      r.take(kernel.name.data(), kernel.name.size());
      r.launch(kernel.launch);
    }
  }
  if (!r.ok)
    return llvm::createStringError(name + ": truncated CUDA modules");
  if (r.at != bytes.size())
    return llvm::createStringError(
        llvm::formatv("{0}: {1} bytes after the CUDA modules", name,
                      bytes.size() - r.at));
  return modules;
}

namespace {

/// The operand a kernel's (first) store writes; -1 if none.
int32_t storedOperand(const llmc::kir::Kernel &kernel) {
  for (const llmc::kir::Instr &instr : kernel.body)
    if (instr.op == llmc::kir::Op::Store)
      return instr.operand;
  return -1;
}

} // namespace

std::vector<int64_t>
llmc::cuda::multiTensorTable(const kir::Program &program,
                             const CudaKernelBatch &batch,
                             llvm::ArrayRef<uint64_t> bases, int64_t &chunks) {
  std::vector<int64_t> table;
  chunks = 0;
  bool sum = batch.kind == CudaKernelBatch::Kind::Sum;
  for (size_t member = 0; member < batch.members(); ++member) {
    int32_t index = sum ? batch.memberSteps[member].first : batch.steps[member];
    const kir::Kernel &kernel = program.kernels[program.steps[index].kernel];
    // A Sum member's stored operand: the element its last kernel stores.
    int32_t total = -1;
    const kir::Access *totalAccess = nullptr;
    if (sum) {
      total = storedOperand(kernel);
      const kir::Kernel &last = program.kernels
          [program.steps[batch.memberSteps[member].second].kernel];
      totalAccess = &last.operands[storedOperand(last)];
    }
    int64_t elements = 1;
    for (int64_t extent : kernel.domain)
      elements *= extent;
    bool aligned = true;
    for (auto [operand, access] : llvm::enumerate(kernel.operands)) {
      const kir::Access &at =
          int32_t(operand) == total ? *totalAccess : access;
      uint64_t address = bases[at.buffer] +
                         uint64_t(at.offset * kir::dtypeBytes(at.dtype));
      table.push_back(int64_t(address));
      if (batch.contiguous[operand])
        aligned &= address % 16 == 0;
    }
    table.push_back(elements);
    table.push_back(chunks);
    table.push_back(aligned ? 1 : 0);
    chunks += (elements + kMultiTensorChunk - 1) / kMultiTensorChunk;
  }
  return table;
}
