// Upward: the contract reaches into the runtime.
#include "llvm/ADT/StringRef.h"
#include "runtime/Cpu/CpuExecutor.h"
