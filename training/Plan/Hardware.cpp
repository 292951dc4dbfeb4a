// `llmc plan`'s hardware data file.
#include "training/Plan/Hardware.h"

#include "frontend/ConfigYaml.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"

using namespace llvm;
using namespace mlir;
using namespace mlir::llmc;
using namespace mlir::llmc::plan;
using mlir::llmc::config::makeError;
using namespace mlir::llmc::config;

//===----------------------------------------------------------------------===//
// Hardware data file
//===----------------------------------------------------------------------===//

const GpuSpec *HardwareTable::find(StringRef name) const {
  for (const GpuSpec &gpu : gpus)
    if (StringRef(gpu.name).equals_insensitive(name))
      return &gpu;
  return nullptr;
}

Expected<HardwareTable> plan::parseHardware(StringRef text,
                                            StringRef bufferName) {
  static constexpr StringRef gpuKeys[] = {"description", "memory_gib",
                                          "hbm_tbps",    "nvlink_gbps",
                                          "ib_gbps",     "tflops"};
  static const std::array<StringRef, kNumPrecisions> precisionKeys = [] {
    std::array<StringRef, kNumPrecisions> names;
    for (unsigned i = 0; i < kNumPrecisions; ++i)
      names[i] = stringifyPrecision(static_cast<Precision>(i));
    return names;
  }();
  YamlFile file(text, bufferName);
  Expected<const YNode *> root =
      file.root("GPU names to their specs (memory_gib, tflops, ...)");
  if (!root)
    return root.takeError();
  HardwareTable table;
  table.path = bufferName.str();
  for (auto [keyNode, spec] : zip((*root)->keys, (*root)->values)) {
    if (keyNode.kind != YNode::Kind::Scalar)
      return file.error(keyNode.range, "expected a GPU name");
    GpuSpec gpu;
    gpu.name = keyNode.text;
    gpu.location = file.where(keyNode.range.Start);
    if (table.find(gpu.name))
      return file.error(keyNode.range,
                        "GPU '" + gpu.name + "' is defined twice");
    if (spec.kind != YNode::Kind::Mapping)
      return file.error(keyNode.range,
                        gpu.name + ": expected a mapping of " +
                            join(ArrayRef<StringRef>(gpuKeys), ", "));
    Fields fields(file, gpuKeys);
    if (Error err = fields.collect(spec))
      return err;
    for (StringRef key : gpuKeys)
      if (!fields.has(key) && key != "description")
        return file.error(keyNode.range,
                          gpu.name + ": missing key '" + key + "'");
    if (fields.has("description")) {
      Expected<std::string> value = fields.getString("description");
      if (!value)
        return value.takeError();
      gpu.description = *value;
    }
    struct NumberKey {
      StringRef key;
      double *field;
    } numbers[] = {{"memory_gib", &gpu.memoryGiB},
                   {"hbm_tbps", &gpu.hbmTBps},
                   {"nvlink_gbps", &gpu.nvlinkGBps},
                   {"ib_gbps", &gpu.ibGBps}};
    for (const NumberKey &n : numbers) {
      Expected<double> value = fields.getNumber(n.key, 0, false);
      if (!value)
        return value.takeError();
      *n.field = *value;
    }
    Expected<const YNode *> tflops = fields.getMapping("tflops");
    if (!tflops)
      return tflops.takeError();
    Fields peaks(file, precisionKeys);
    if (Error err = peaks.collect(**tflops))
      return err;
    bool any = false;
    for (unsigned i = 0; i < kNumPrecisions; ++i) {
      if (!peaks.has(precisionKeys[i]))
        continue;
      Expected<double> value = peaks.getNumber(precisionKeys[i], 0, false);
      if (!value)
        return value.takeError();
      gpu.peakTflops[i] = *value;
      any = true;
    }
    if (!any)
      return fields.error("tflops", "give the dense peak of at least one of " +
                                        join(precisionKeys, ", "));
    table.gpus.push_back(std::move(gpu));
  }
  return table;
}

Expected<HardwareTable> plan::loadHardwareFile(StringRef path) {
  auto buffer = readFile(path, "hardware data file");
  if (!buffer)
    return buffer.takeError();
  return parseHardware((*buffer)->getBuffer(), path);
}

std::string plan::getDefaultHardwarePath() {
  if (std::optional<std::string> env = sys::Process::GetEnv("LLMC_HARDWARE"))
    if (!env->empty())
      return *env;
  // Installed: PREFIX/share/llmc/hardware.yaml beside PREFIX/bin/llmc;
  // in the build tree: the source tree's examples/hardware.yaml.
  SmallString<256> installed(sys::fs::getMainExecutable(nullptr, nullptr));
  sys::path::remove_filename(installed);
  sys::path::append(installed, "..", "share", "llmc", "hardware.yaml");
  if (sys::fs::exists(installed))
    return std::string(installed);
  return LLMC_DEFAULT_HARDWARE_FILE;
}

Expected<GpuSpec> plan::lookupGpu(const HardwareTable &table, StringRef name) {
  if (const GpuSpec *gpu = table.find(name))
    return *gpu;
  std::vector<std::string> known;
  for (const GpuSpec &gpu : table.gpus)
    known.push_back(gpu.name);
  return makeError("unknown GPU '" + name +
                   "': add it to the hardware data "
                   "file " +
                   table.path + " (known: " + join(known, ", ") + ")");
}
