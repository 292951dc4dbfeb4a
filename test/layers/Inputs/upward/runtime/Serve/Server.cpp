// The server may use the tokenizers of frontend, and nothing else of it.
#include "frontend/Tokenizer.h"
#include "frontend/GptBuilder.h"
#include "runtime/CachedGenerate.h"
