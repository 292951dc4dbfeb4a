// Downward and sideways only: allowed.
#include "ir/kernel/Program.h"
#include "passes/Passes.h"
#include "codegen/Plan.h"
