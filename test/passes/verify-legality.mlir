// RUN: llmc-opt %s --split-input-file --verify-diagnostics --llmc-verify-legality | FileCheck %s

// Tests that a legal tiny forward (named parameters, two dropout sites with
// distinct streams) passes unchanged.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[WTE:[a-z0-9]+]]: tensor<16x8xf32> {llmc.param = "wte"}, %[[LNW:[a-z0-9]+]]: tensor<8xf32> {llmc.param = "ln_f.weight"}, %[[LNB:[a-z0-9]+]]: tensor<8xf32> {llmc.param = "ln_f.bias"}, %[[TOK:[a-z0-9]+]]: tensor<2x4xi32>, %[[TGT:[a-z0-9]+]]: tensor<2x4xi32>) -> tensor<f32>
// CHECK-NEXT: %[[X:.*]] = llmc.embedding %[[WTE]], %[[TOK]] : tensor<16x8xf32>, tensor<2x4xi32>
// CHECK-NEXT: %[[D0:.*]] = llmc.dropout %[[X]] {rate = 1.000000e-01 : f32, stream = 0 : i64} : tensor<2x4x8xf32>
// CHECK-NEXT: %[[Y:.*]], %{{.*}}, %{{.*}} = llmc.layer_norm %[[D0]], %[[LNW]], %[[LNB]] {epsilon = 9.99999974E-6 : f32} : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
// CHECK-NEXT: %[[D1:.*]] = llmc.dropout %[[Y]] {rate = 1.000000e-01 : f32, stream = 1 : i64} : tensor<2x4x8xf32>
// CHECK-NEXT: %[[LOGITS:.*]] = llmc.matmul %[[D1]], %[[WTE]] {transpose_b} : tensor<2x4x8xf32>, tensor<16x8xf32>
// CHECK-NEXT: %[[LOSS:.*]], %{{.*}} = llmc.cross_entropy %[[LOGITS]], %[[TGT]] : tensor<2x4x16xf32>, tensor<2x4xi32>
// CHECK-NEXT: return %[[LOSS]] : tensor<f32>
func.func @forward(%wte: tensor<16x8xf32> {llmc.param = "wte"},
                   %lnw: tensor<8xf32> {llmc.param = "ln_f.weight"},
                   %lnb: tensor<8xf32> {llmc.param = "ln_f.bias"},
                   %tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
  %x = llmc.embedding %wte, %tokens : tensor<16x8xf32>, tensor<2x4xi32>
  %d0 = llmc.dropout %x {rate = 0.1 : f32, stream = 0 : i64} : tensor<2x4x8xf32>
  %y, %mean, %rstd = llmc.layer_norm %d0, %lnw, %lnb {epsilon = 1.0e-5 : f32} : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %d1 = llmc.dropout %y {rate = 0.1 : f32, stream = 1 : i64} : tensor<2x4x8xf32>
  %logits = llmc.matmul %d1, %wte {transpose_b} : tensor<2x4x8xf32>, tensor<16x8xf32>
  %loss, %lse = llmc.cross_entropy %logits, %targets : tensor<2x4x16xf32>, tensor<2x4xi32>
  return %loss : tensor<f32>
}

// -----

// Tests that unnamed bf16 parameters and i64 ids are legal, and that only
// @forward is restricted: another function may call anything.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[WTE:[a-z0-9]+]]: tensor<16x8xbf16>, %[[TOK:[a-z0-9]+]]: tensor<4xi64>, %[[TGT:[a-z0-9]+]]: tensor<4xi64>) -> tensor<f32>
// CHECK-NEXT: %[[X:.*]] = llmc.embedding %[[WTE]], %[[TOK]] : tensor<16x8xbf16>, tensor<4xi64>
// CHECK-NEXT: %[[LOGITS:.*]] = llmc.matmul %[[X]], %[[WTE]] {transpose_b} : tensor<4x8xbf16>, tensor<16x8xbf16>
// CHECK-NEXT: %[[LOSS:.*]], %{{.*}} = llmc.cross_entropy %[[LOGITS]], %[[TGT]] : tensor<4x16xbf16>, tensor<4xi64>
// CHECK-NEXT: return %[[LOSS]] : tensor<f32>
// CHECK-LABEL: func.func @eval(
// CHECK-NEXT: %[[LOSS:.*]] = call @forward(
// CHECK-NEXT: return %[[LOSS]] : tensor<f32>
// The modules below are rejected, so nothing more is printed.
// CHECK-NOT: func.func
func.func @forward(%wte: tensor<16x8xbf16>, %tokens: tensor<4xi64>, %targets: tensor<4xi64>) -> tensor<f32> {
  %x = llmc.embedding %wte, %tokens : tensor<16x8xbf16>, tensor<4xi64>
  %logits = llmc.matmul %x, %wte {transpose_b} : tensor<4x8xbf16>, tensor<16x8xbf16>
  %loss, %lse = llmc.cross_entropy %logits, %targets : tensor<4x16xbf16>, tensor<4xi64>
  return %loss : tensor<f32>
}
func.func @eval(%wte: tensor<16x8xbf16>, %tokens: tensor<4xi64>, %targets: tensor<4xi64>) -> tensor<f32> {
  %loss = func.call @forward(%wte, %tokens, %targets) : (tensor<16x8xbf16>, tensor<4xi64>, tensor<4xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests that a module without @forward is rejected.
// expected-error @+1 {{module has no @forward function with a body}}
module {
  func.func @model(%tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
    %loss = llmc.fill 0.0 : tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// Tests that a declaration of @forward is not enough.
// expected-error @+1 {{module has no @forward function with a body}}
module {
  func.func private @forward(tensor<8xf32>, tensor<4xi32>, tensor<4xi32>) -> tensor<f32>
}

// -----

// Tests that @forward takes at least the parameters, tokens and targets.
// expected-error @+1 {{@forward must take parameters, then tokens and targets; it has 2 arguments}}
func.func @forward(%tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
  %loss = llmc.fill 0.0 : tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests that targets must be integer ids.
// expected-error @+1 {{the last two arguments of @forward (tokens, targets) must be i32 or i64 tensors, got 'tensor<4xi32>' and 'tensor<4xf32>'}}
func.func @forward(%w: tensor<8xf32>, %tokens: tensor<4xi32>, %targets: tensor<4xf32>) -> tensor<f32> {
  %loss = llmc.fill 0.0 : tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests that tokens and targets have one shape.
// expected-error @+1 {{tokens and targets must have one shape, got 'tensor<2x4xi32>' and 'tensor<8xi32>'}}
func.func @forward(%w: tensor<8xf32>, %tokens: tensor<2x4xi32>, %targets: tensor<8xi32>) -> tensor<f32> {
  %loss = llmc.fill 0.0 : tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests that parameters are floating-point tensors.
// expected-error @+1 {{parameter #1 must be a statically shaped f32, f16 or bf16 tensor, got 'tensor<8xi32>'}}
func.func @forward(%w: tensor<8xf32>, %v: tensor<8xi32>, %tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
  %loss = llmc.fill 0.0 : tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests that parameter names are unique.
// expected-error @+1 {{parameters #0 and #2 share the name 'ln_f.weight'}}
func.func @forward(%a: tensor<8xf32> {llmc.param = "ln_f.weight"},
                   %b: tensor<8xf32> {llmc.param = "ln_f.bias"},
                   %c: tensor<8xf32> {llmc.param = "ln_f.weight"},
                   %tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
  %loss = llmc.fill 0.0 : tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Tests that a second result of @forward must be logits of the tokens' shape
// plus a vocabulary dimension.
// expected-error @+1 {{the second result of @forward must be the logits, a float tensor of the tokens' shape followed by the vocabulary; got 'tensor<4xf32>'}}
func.func @forward(%w: tensor<8xf32>, %tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> (tensor<f32>, tensor<4xf32>) {
  %loss = llmc.fill 0.0 : tensor<f32>
  %lse = llmc.fill 0.0 : tensor<4xf32>
  return %loss, %lse : tensor<f32>, tensor<4xf32>
}

// -----

// Tests that @forward returns at most the loss and the logits.
// expected-error @+1 {{@forward must return the loss as tensor<f32>, optionally followed by the logits; got 'tensor<f32>', 'tensor<4x8xf32>', 'tensor<f32>'}}
func.func @forward(%w: tensor<8xf32>, %tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> (tensor<f32>, tensor<4x8xf32>, tensor<f32>) {
  %loss = llmc.fill 0.0 : tensor<f32>
  %logits = llmc.fill 0.0 : tensor<4x8xf32>
  return %loss, %logits, %loss : tensor<f32>, tensor<4x8xf32>, tensor<f32>
}

// -----

// Tests that @forward has a single block (an unreachable second block is
// the only control flow that func and llmc can express).
// expected-error @+1 {{@forward must have one block, no control flow}}
func.func @forward(%w: tensor<8xf32>, %tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
  %loss = llmc.fill 0.0 : tensor<f32>
  return %loss : tensor<f32>
^bb1(%other: tensor<f32>):
  return %other : tensor<f32>
}

// -----

// Tests that @forward contains only llmc ops: a call is rejected.
func.func @helper(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
func.func @forward(%w: tensor<4xf32>, %tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
  // expected-error @+1 {{'func.call' op is not an llmc op; @forward may contain only llmc ops and func.return}}
  %y = func.call @helper(%w) : (tensor<4xf32>) -> tensor<4xf32>
  %loss = llmc.reduce_sum %y dims [0] : tensor<4xf32>
  return %loss : tensor<f32>
}

// -----

// Tests that two dropout sites may not share a stream (they would draw the
// same mask).
func.func @forward(%w: tensor<4xf32>, %tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
  // expected-note @+1 {{first used here}}
  %a = llmc.dropout %w {rate = 0.1 : f32, stream = 7 : i64} : tensor<4xf32>
  %b = llmc.dropout %w {rate = 0.1 : f32, stream = 8 : i64} : tensor<4xf32>
  // expected-error @+1 {{'llmc.dropout' op reuses dropout stream 7}}
  %c = llmc.dropout %a {rate = 0.2 : f32, stream = 7 : i64} : tensor<4xf32>
  %sum = llmc.add %b, %c : tensor<4xf32>, tensor<4xf32>
  %loss = llmc.reduce_mean %sum dims [0] : tensor<4xf32>
  return %loss : tensor<f32>
}

// -----

// Tests that a stream at the int64 extreme is tracked like any other.
func.func @forward(%w: tensor<4xf32>, %t: tensor<4xi32>, %y: tensor<4xi32>) -> tensor<f32> {
  // expected-note @+1 {{first used here}}
  %a = llmc.dropout %w {rate = 0.1 : f32, stream = 9223372036854775807 : i64} : tensor<4xf32>
  // expected-error @+1 {{'llmc.dropout' op reuses dropout stream 9223372036854775807}}
  %b = llmc.dropout %a {rate = 0.1 : f32, stream = 9223372036854775807 : i64} : tensor<4xf32>
  %l = llmc.constant dense<0.0> : tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that parameters have an element type the llmc ops accept.
// expected-error @+1 {{parameter #0 must be a statically shaped f32, f16 or bf16 tensor, got 'tensor<4xf64>'}}
func.func @forward(%w: tensor<4xf64>, %t: tensor<4xi32>, %y: tensor<4xi32>) -> tensor<f32> {
  %l = llmc.constant dense<0.0> : tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that token ids are i32 or i64, not any integer.
// expected-error @+1 {{the last two arguments of @forward (tokens, targets) must be i32 or i64 tensors, got 'tensor<4xi8>' and 'tensor<4xi8>'}}
func.func @forward(%w: tensor<4xf32>, %t: tensor<4xi8>, %y: tensor<4xi8>) -> tensor<f32> {
  %l = llmc.constant dense<0.0> : tensor<f32>
  return %l : tensor<f32>
}

// -----

// Tests that a parameter name that is not a string is an error, not ignored.
// expected-error @+1 {{the llmc.param name of parameter #0 must be a string, got 3 : i64}}
func.func @forward(%w: tensor<4xf32> {llmc.param = 3}, %t: tensor<4xi32>, %y: tensor<4xi32>) -> tensor<f32> {
  %l = llmc.constant dense<0.0> : tensor<f32>
  return %l : tensor<f32>
}

