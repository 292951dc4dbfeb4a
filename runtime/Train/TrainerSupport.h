// What the trainer's files share: the clock, scalar inputs and outputs of
// the programs, and how numbers are shown in the log.
#ifndef LLMC_RUNTIME_TRAIN_TRAINERSUPPORT_H
#define LLMC_RUNTIME_TRAIN_TRAINERSUPPORT_H

#include "ir/kernel/StepScalar.h"
#include "runtime/Exec/Executor.h"
#include "runtime/Exec/HostTensor.h"
#include "runtime/Serve/Generate.h"
#include "runtime/Train/Console.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace llmc::runtime::trainer {
using Clock = std::chrono::steady_clock;

inline double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

inline std::string joinPath(llvm::StringRef dir, llvm::StringRef name) {
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, name);
  return std::string(path);
}

inline HostTensor tokenTensor(const std::vector<int32_t> &ids, int64_t batch,
                       int64_t seqLen) {
  HostTensor tensor = HostTensor::zeros(kir::DType::I32, {batch, seqLen});
  std::copy(ids.begin(), ids.end(), tensor.i32().begin());
  return tensor;
}

/// The value of an f32 step scalar kept in the store (the loss scale's
/// states).
inline llvm::Expected<double> storedScalar(const TensorStore &store,
                                           kir::StepScalar scalar) {
  llvm::Expected<HostTensor> tensor = store.get(kir::stepScalarName(scalar));
  if (!tensor)
    return tensor.takeError();
  return double(tensor->toF32()[0]);
}

/// A loss scale as people read it: 65536, 0.25 (powers of two, mostly).
inline std::string formatScale(double scale) {
  char text[32];
  if (scale >= 1 && scale < 1e15 && scale == std::floor(scale))
    std::snprintf(text, sizeof(text), "%.0f", scale);
  else
    std::snprintf(text, sizeof(text), "%g", scale);
  return text;
}

inline std::string formatDuration(double seconds) {
  long long s = (long long)(seconds + 0.5);
  char text[32];
  if (seconds < 60)
    std::snprintf(text, sizeof(text), "%.1fs", seconds);
  else if (s >= 3600)
    std::snprintf(text, sizeof(text), "%lldh%02lldm", s / 3600, s / 60 % 60);
  else
    std::snprintf(text, sizeof(text), "%lldm%02llds", s / 60, s % 60);
  return text;
}

/// A sample as the log shows it: made safe for a terminal (TerminalText),
/// blank space at both ends dropped, each further line indented under the
/// first. metrics.jsonl keeps the text as it was generated.
inline std::string printable(llvm::StringRef text) {
  std::string safe = TerminalText::escape(text);
  llvm::StringRef trimmed = llvm::StringRef(safe).trim();
  std::string shown;
  for (char c : trimmed) {
    shown += c;
    if (c == '\n')
      shown += "        "; // under the text after "sample: "
  }
  return shown;
}

/// How often the status line is redrawn at most (a tiny model takes a
/// few milliseconds a step; a terminal need not repaint that often).
inline constexpr double kStatusSeconds = 0.1;

inline std::string formatRate(double value) {
  if (value >= 1e6)
    return llvm::formatv("{0:f2}M", value / 1e6).str();
  if (value >= 1e3)
    return llvm::formatv("{0:f1}k", value / 1e3).str();
  return llvm::formatv("{0:f0}", value).str();
}

} // namespace llmc::runtime::trainer

#endif // LLMC_RUNTIME_TRAIN_TRAINERSUPPORT_H
