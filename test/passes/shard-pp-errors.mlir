// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | not llmc-opt '--llmc-pipeline-parallel=pp=3 stage=0' 2>&1 | FileCheck %s --check-prefix=MORE
// RUN: llmc emit-model %llmc_src/test/passes/Inputs/gpt-4-blocks.yaml --batch 1 | not llmc-opt '--llmc-pipeline-parallel=pp=2 stage=0 stage-blocks=1,3' 2>&1 | FileCheck %s --check-prefix=FIRST
// RUN: llmc emit-model %llmc_src/test/passes/Inputs/gpt-4-blocks.yaml --batch 1 | not llmc-opt '--llmc-pipeline-parallel=pp=3 stage=0 stage-blocks=0,2,2' 2>&1 | FileCheck %s --check-prefix=EMPTY
// RUN: llmc emit-model %llmc_src/test/passes/Inputs/gpt-4-blocks.yaml --batch 1 | not llmc-opt '--llmc-pipeline-parallel=pp=2 stage=0 stage-blocks=0,4' 2>&1 | FileCheck %s --check-prefix=BEYOND
// RUN: llmc emit-model %llmc_src/test/passes/Inputs/gpt-4-blocks.yaml --batch 1 | not llmc-opt '--llmc-pipeline-parallel=pp=3 stage=0 stage-blocks=0,2' 2>&1 | FileCheck %s --check-prefix=COUNT
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | not llmc-opt '--llmc-pipeline-parallel=pp=2 stage=2' 2>&1 | FileCheck %s --check-prefix=STAGE
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | not llmc-opt '--llmc-pipeline-parallel=pp=0' 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | not llmc-opt --llmc-autodiff '--llmc-pipeline-parallel=pp=2 stage=1' 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: not llmc-opt %s --split-input-file '--llmc-pipeline-parallel=pp=2 stage=1' 2>&1 | FileCheck %s

// Every stage holds at least one block: pp at most the blocks, and a
// given cut (stage-blocks, the first block of each stage) starts at block
// 0, increases, and leaves the last stage a block.
// MORE: llmc-pipeline-parallel: pp=3 is more than the model's 2 transformer blocks; every stage needs at least one (choose pp <= 2)
// FIRST: llmc-pipeline-parallel: stage-blocks: the first stage must start at block 0
// EMPTY: llmc-pipeline-parallel: stage-blocks: stage 2 starts at block 2: the first blocks must increase and lie below the model's 4 blocks, so that every stage holds one
// BEYOND: llmc-pipeline-parallel: stage-blocks: stage 1 starts at block 4: the first blocks must increase
// COUNT: llmc-pipeline-parallel: stage-blocks lists 2 first blocks for pp=3 stages
// STAGE: llmc-pipeline-parallel: stage must lie in [0, pp), got 2 for pp=2
// ZERO: llmc-pipeline-parallel: pp must be at least 1, got 0
// ORDER: llmc-pipeline-parallel runs before llmc-autodiff

// A model without transformer blocks has nothing to cut.
// CHECK: llmc-pipeline-parallel: @forward has no transformer blocks (parameters h.<i>.*) to cut into stages
func.func @forward(%w: tensor<8x4xf32> {llmc.param = "proj.weight"}, %x: tensor<2x4xf32> {llmc.input = "tokens"}) -> tensor<f32> {
  %h = llmc.matmul %x, %w {transpose_b} : tensor<2x4xf32>, tensor<8x4xf32>
  %s = llmc.reduce_sum %h dims [0, 1] : tensor<2x8xf32>
  return %s : tensor<f32>
}

// -----

// Two values cross the boundary (a skip connection around h.1 besides the
// residual): each boundary is cut at one value.
// CHECK: llmc-pipeline-parallel: 2 values cross from stage 0 to stage 1; a stage boundary must be crossed by one value (the residual stream)
func.func @forward(%w0: tensor<4x4xf32> {llmc.param = "h.0.w"}, %w1: tensor<4x4xf32> {llmc.param = "h.1.w"}, %x: tensor<2x4xf32> {llmc.input = "tokens"}) -> tensor<f32> {
  %a = llmc.matmul %x, %w0 {transpose_b} : tensor<2x4xf32>, tensor<4x4xf32>
  %b = llmc.gelu %a approximate = tanh : tensor<2x4xf32>
  %c = llmc.matmul %b, %w1 {transpose_b} : tensor<2x4xf32>, tensor<4x4xf32>
  %d = llmc.add %c, %a : tensor<2x4xf32>, tensor<2x4xf32>
  %s = llmc.reduce_sum %d dims [0, 1] : tensor<2x4xf32>
  return %s : tensor<f32>
}
