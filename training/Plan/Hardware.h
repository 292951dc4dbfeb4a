// `llmc plan`'s hardware data file: the GPUs (memory, bandwidths, peak
// FLOP/s by precision) of examples/hardware.yaml or $LLMC_HARDWARE.
#ifndef LLMC_CODEGEN_PLAN_HARDWARE_H
#define LLMC_CODEGEN_PLAN_HARDWARE_H

#include "frontend/PlanConfig.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mlir::llmc::plan {

//===----------------------------------------------------------------------===//
// Hardware data file
//===----------------------------------------------------------------------===//

struct GpuSpec {
  std::string name;        // the key in the data file, e.g. "a100-80gb"
  std::string description; // e.g. "NVIDIA A100 SXM4 80GB"
  double memoryGiB = 0;
  double hbmTBps = 0;
  double nvlinkGBps = 0; // intra-node, both directions as datasheets state
  double ibGBps = 0;     // inter-node per GPU, one direction
  /// Dense peak TFLOP/s by precision; 0: not supported.
  std::array<double, kNumPrecisions> peakTflops{};
  std::string location; // "hardware.yaml:12:1", for labels

  double peakFlops(Precision p) const {
    return peakTflops[static_cast<unsigned>(p)] * 1e12;
  }
};

struct HardwareTable {
  std::string path;
  std::vector<GpuSpec> gpus;
  /// Case-insensitive lookup; nullptr when absent.
  const GpuSpec *find(llvm::StringRef name) const;
};

llvm::Expected<HardwareTable> parseHardware(llvm::StringRef text,
                                            llvm::StringRef bufferName);
llvm::Expected<HardwareTable> loadHardwareFile(llvm::StringRef path);
/// The data file a build uses when none is given: $LLMC_HARDWARE if set,
/// else the installed PREFIX/share/llmc/hardware.yaml next to an installed
/// llmc, else examples/hardware.yaml of the source tree.
std::string getDefaultHardwarePath();
/// The named GPU, or an error that names the data file to add it to.
llvm::Expected<GpuSpec> lookupGpu(const HardwareTable &table,
                                  llvm::StringRef name);

} // namespace mlir::llmc::plan

#endif // LLMC_CODEGEN_PLAN_HARDWARE_H
