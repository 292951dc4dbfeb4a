// LLMC_GUARD_INJECT: test faults for the training guard.
#include "tools/llmc/GuardInject.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/Twine.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace rt = ::llmc::runtime;

namespace {
struct Fault {
  enum class Kind { LrBurst, Set };
  Kind kind = Kind::Set;
  int64_t step = -1;
  double value = NAN; // the lr factor, or the value written
  std::string tensor; // empty: the first weight
  bool repeat = false;
  bool fired = false;
};

/// Writes `fault.value` into the first element of its tensor.
llvm::Error poison(const Fault &fault, rt::TensorStore &store) {
  for (const std::string &name : store.names()) {
    llvm::StringRef n(name);
    bool match = !fault.tensor.empty()
                     ? n == fault.tensor
                     : n.ends_with(".weight") && !n.starts_with("grad.") &&
                           !n.contains("adam") && !n.contains(".m.") &&
                           !n.contains(".v.");
    if (!match)
      continue;
    llvm::Expected<rt::HostTensor> tensor = store.get(name);
    if (!tensor)
      return tensor.takeError();
    std::vector<float> values = tensor->toF32();
    values[0] = float(fault.value);
    return store.set(name, rt::HostTensor::fromF32(values, tensor->shape,
                                                 tensor->dtype));
  }
  return llvm::createStringError(
      "LLMC_GUARD_INJECT: no tensor '" +
      (fault.tensor.empty() ? std::string("*.weight") : fault.tensor) +
      "' in the store");
}
} // namespace

llvm::Expected<std::function<llvm::Error(int64_t, rt::TensorStore &,
                                         double &)>>
mlir::llmc::parseGuardInjection(llvm::StringRef spec) {
  auto faults = std::make_shared<std::vector<Fault>>();
  llvm::SmallVector<llvm::StringRef> items;
  spec.split(items, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef item : items) {
    Fault fault;
    llvm::StringRef text = item.trim();
    fault.repeat = text.consume_back(":repeat");
    llvm::SmallVector<llvm::StringRef> parts;
    text.split(parts, ':');
    llvm::StringRef kind = parts.front();
    size_t arity = kind == "lr_burst" ? 3 : kind == "set" ? 4 : 2;
    bool bad = (kind != "lr_burst" && kind != "nan" && kind != "set") ||
               parts.size() != arity ||
               parts[1].getAsInteger(10, fault.step) || fault.step < 0;
    if (!bad && kind == "lr_burst") {
      fault.kind = Fault::Kind::LrBurst;
      bad = parts[2].getAsDouble(fault.value);
    } else if (!bad && kind == "set") {
      fault.tensor = parts[2].str();
      bad = fault.tensor.empty() || parts[3].getAsDouble(fault.value);
    }
    if (bad)
      return llvm::createStringError(
          llvm::Twine("LLMC_GUARD_INJECT: '") + item +
          "': expected lr_burst:STEP:FACTOR, nan:STEP or "
          "set:STEP:TENSOR:VALUE, optionally followed by :repeat");
    faults->push_back(std::move(fault));
  }
  return [faults](int64_t step, rt::TensorStore &store,
                  double &lrScale) -> llvm::Error {
    for (Fault &fault : *faults) {
      if (fault.step != step || (fault.fired && !fault.repeat))
        continue;
      fault.fired = true;
      if (fault.kind == Fault::Kind::LrBurst) {
        lrScale *= fault.value;
        continue;
      }
      if (llvm::Error err = poison(fault, store))
        return err;
    }
    return llvm::Error::success();
  };
}
