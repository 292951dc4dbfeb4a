// One case per diagnostic of ir/LlmcOps.cpp, then a few of the ODS
// constraints. Ops with inferred result types check their operands while
// parsing the custom form; what the custom form cannot express (a declared
// result type, a missing operand) is written in the generic form, where the
// InferTypeOpInterface verifier adds "failed to infer returned types".

//===----------------------------------------------------------------------===//
// Operand checks shared by all inferred ops
//===----------------------------------------------------------------------===//

// Tests that a dynamically shaped operand is rejected while inferring.
func.func @dynamic_operand(%x: tensor<?x8xf32>, %w: tensor<8x16xf32>) {
  // expected-error @+1 {{'llmc.matmul' op lhs must be a statically shaped tensor, got 'tensor<?x8xf32>'}}
  %0 = llmc.matmul %x, %w : tensor<?x8xf32>, tensor<8x16xf32>
  return
}
