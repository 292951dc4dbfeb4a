// The llmc dialect class and its attributes.
#ifndef LLMC_IR_LLMCDIALECT_H
#define LLMC_IR_LLMCDIALECT_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"

#include "ir/LlmcDialect.h.inc"
#include "ir/LlmcEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "ir/LlmcAttrs.h.inc"

#endif // LLMC_IR_LLMCDIALECT_H
