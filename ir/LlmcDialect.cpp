// Registration of the llmc dialect, its attributes and its op interface.
#include "ir/LlmcDialect.h"
#include "ir/LlmcOps.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::llmc;

#include "ir/LlmcDialect.cpp.inc"
#include "ir/LlmcEnums.cpp.inc"
#include "ir/LlmcInterfaces.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "ir/LlmcAttrs.cpp.inc"

void LlmcDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "ir/LlmcAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "ir/LlmcOps.cpp.inc"
      >();
}

Operation *LlmcDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                            Type type, Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, elements);
}
