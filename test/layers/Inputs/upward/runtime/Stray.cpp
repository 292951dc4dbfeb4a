// A runtime source outside every folder by job.
#include "ir/kernel/Program.h"
