// Upward inside the runtime: the executor interface reaches into the trainer.
#include "runtime/Train/Trainer.h"
#include "runtime/Comm/Communicator.h"
