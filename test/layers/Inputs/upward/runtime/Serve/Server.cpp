// Upward: the server reaches into frontend (it is given a TextCodec instead).
#include "frontend/Tokenizer.h"
#include "runtime/Serve/CachedGenerate.h"
