// Upward: the runtime reaches into codegen.
#include "codegen/KernelToCuda/KernelToCuda.h"
#include "ir/kernel/Program.h"
