// CudaBinaries::imageFor: which compiled image a GPU loads.
#include "ir/kernel/CudaModule.h"

#include "llvm/Support/FormatVariadic.h"

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
