// Upward: the contract reaches into the runtime.
#include "runtime/Cpu/CpuExecutor.h"
#include "llvm/ADT/StringRef.h"
