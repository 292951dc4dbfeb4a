// The CUDA target: emitter + NVRTC -> an artifact's CUDA section.
#include "codegen/KernelToCuda/CudaTarget.h"

#include "codegen/KernelToCuda/KernelToCuda.h"

using namespace llmc;

llvm::Expected<kir::CudaSection>
llmc::cuda::buildCudaSection(const kir::Program &program, NvrtcStats *stats,
                             const NvrtcOptions &options) {
  kir::CudaSection section;
  section.codegenVersion = kCudaCodegenVersion;
  section.source = emitCudaModule(program);
  llvm::Expected<CudaBinaries> binaries = compileCuda(
      section.source, (program.function.empty() ? "llmc" : program.function) +
                          std::string(".cu"),
      options, stats);
  if (!binaries)
    return binaries.takeError();
  for (Cubin &cubin : binaries->cubins)
    section.cubins.push_back({cubin.arch, std::move(cubin.bytes)});
  section.ptx = std::move(binaries->ptx);
  section.ptxArch = binaries->ptxArch;
  for (const kir::Kernel &kernel : program.kernels) {
    CudaLaunch launch = chooseLaunch(kernel);
    kir::CudaSection::Launch out;
    out.kernel = kernel.name;
    for (int d = 0; d < 3; ++d) {
      out.grid[d] = launch.grid[d];
      out.block[d] = launch.block[d];
    }
    out.sharedBytes = launch.sharedBytes;
    out.staticSharedBytes = launch.staticSharedBytes;
    section.launches.push_back(std::move(out));
  }
  return section;
}
