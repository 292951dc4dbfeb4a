// Upward: the contract reaches into the runtime.
#include "runtime/Executor.h"
#include "llvm/ADT/StringRef.h"
