// Sideways: the CUDA executor reaches into the CPU one.
#include "runtime/Cpu/CpuExecutor.h"
#include "runtime/Exec/Executor.h"
