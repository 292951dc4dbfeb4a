// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt --llmc-autodiff --llmc-optimizer '--llmc-shard=dp=4 bucket-mb=0.06' | FileCheck %s
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt --llmc-autodiff --llmc-optimizer --llmc-shard | FileCheck %s --check-prefix=ONE
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt --llmc-autodiff --llmc-optimizer '--llmc-shard=dp=2' | FileCheck %s --check-prefix=WHOLE
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt --llmc-autodiff --llmc-optimizer '--llmc-shard=dp=2' --llmc-loss-scaling | FileCheck %s --check-prefix=SCALED
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt --llmc-autodiff --llmc-optimizer '--llmc-shard=dp=4 zero=1' | FileCheck %s --check-prefixes=ZERO12,ZERO1
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt --llmc-autodiff --llmc-optimizer '--llmc-shard=dp=4 zero=2' | FileCheck %s --check-prefixes=ZERO12,ZERO2
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt --llmc-autodiff --llmc-optimizer '--llmc-shard=dp=4 zero=3' | FileCheck %s --check-prefix=ZERO3
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt '--llmc-shard=dp=4 zero=3' | FileCheck %s --check-prefix=FORWARD3
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | not llmc-opt --llmc-shard=dp=2 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | not llmc-opt --llmc-autodiff --llmc-optimizer '--llmc-shard=dp=0' 2>&1 | FileCheck %s --check-prefix=DP0
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | not llmc-opt --llmc-autodiff --llmc-optimizer '--llmc-shard=dp=2 zero=4' 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | not llmc-opt --llmc-autodiff --llmc-optimizer '--llmc-shard=dp=2 bucket-mb=0' 2>&1 | FileCheck %s --check-prefix=BUCKET

// DDP on 4 ranks with buckets of 0.06 MiB (15728 floats): the gradients in
// the order the backward produces them (ln_f first, the position table
// wpe last), whole gradients per bucket, each bucket
// concatenated, all-reduced (avg) right after its last gradient and cut
// back into the results. The first bucket is ln_f's two vectors and the
// last block's c_proj bias; the 64x256 c_proj weight (16384 floats, over
// the cap) is a bucket of its own.
// CHECK-LABEL: func.func @grad_step(
// CHECK: %[[B0:.*]] = llmc.concat %{{.*}}, %{{.*}}, %{{.*}} dim 0 : tensor<64xf32>, tensor<64xf32>, tensor<64xf32>
// CHECK-NEXT: %[[R0:.*]] = llmc.all_reduce %[[B0]] avg on "dp" size 4 {llmc.bucket = 0 : i64} : tensor<192xf32>
// CHECK: llmc.all_reduce %{{.*}} avg on "dp" size 4 {llmc.bucket = 1 : i64} : tensor<16384xf32>
// CHECK: llmc.all_reduce %{{.*}} avg on "dp" size 4 {llmc.bucket = 2 : i64} : tensor<256xf32>
// The backward goes on between the buckets:
// CHECK: llmc.matmul
// CHECK: llmc.all_reduce %{{.*}} avg on "dp" size 4 {llmc.bucket = 3 : i64}
// CHECK: llmc.all_reduce %{{.*}} avg on "dp" size 4 {llmc.bucket = 12 : i64} : tensor<4096xf32>
// CHECK-NOT: llmc.all_reduce
// CHECK: return
// The step without communication, for the micro-batches before the last:
// CHECK-LABEL: func.func @grad_step_no_sync(
// CHECK-NOT: llmc.all_reduce
// CHECK-LABEL: func.func @update_step(
// CHECK-NOT: llmc.all_reduce

// dp=1 (the default) changes nothing.
// ONE-NOT: llmc.all_reduce
// ONE-NOT: grad_step_no_sync

// The default cap (25 MiB) holds the whole tiny model: one bucket, after
// the last gradient (wte's).
// WHOLE-LABEL: func.func @grad_step(
// WHOLE: llmc.all_reduce %{{.*}} avg on "dp" size 2 {llmc.bucket = 0 : i64} : tensor<{{[0-9]+}}xf32>
// WHOLE-NOT: llmc.all_reduce
// WHOLE-LABEL: func.func @grad_step_no_sync(

// fp16: loss scaling seeds both grad steps with the scaled dloss, so that
// the micro-batches of a step accumulate gradients of one scale.
// SCALED-LABEL: func.func @grad_step(
// SCALED-SAME: llmc.state = "loss_scale"
// SCALED-LABEL: func.func @grad_step_no_sync(
// SCALED-SAME: llmc.state = "loss_scale"

// ZeRO-1/2 on 4 ranks (the tiny model's 120576 parameters in one bucket,
// padded per parameter to a multiple of 4: 30144 per rank). @grad_step
// interleaves the gradients as [4, 30144] (row r: each parameter's block
// r) and reduce-scatters them (avg): rank r adds its blocks into
// grad.shard.<p>. ZeRO-1 sums into the full grad.<p> first and drains it
// (zeros); ZeRO-2 has no full gradient buffers, and no no_sync step.
// ZERO12-LABEL: func.func @grad_step(
// ZERO1-SAME: llmc.state = "grad.wte"
// ZERO2-NOT: llmc.state = "grad.wte"
// ZERO12-SAME: llmc.state = "grad.shard.wte"
// ZERO12: llmc.concat {{.*}} dim 1 : tensor<4x16xf32>, tensor<4x16xf32>
// ZERO12: %[[RS:.*]] = llmc.reduce_scatter %{{.*}} avg dim 0 on "dp" size 4 {llmc.bucket = 0 : i64} : tensor<120576xf32>
// ZERO12: llmc.slice %[[RS]] offsets [0] sizes [16] : tensor<30144xf32>
// ZERO1: llmc.fill 0.000000e+00 : tensor<256x64xf32>
// ZERO12: return
// ZERO1-LABEL: func.func @grad_step_no_sync(
// ZERO2-NOT: @grad_step_no_sync
// @update_step works on the blocks: the master copy shard.<p>, the
// optimizer states' blocks and the gradient's; the sum of squares is
// all-reduced before the norm's square root; the new master blocks are
// all-gathered into the full parameters.
// ZERO12-LABEL: func.func @update_step(
// ZERO12-SAME: tensor<4096xf32> {llmc.state = "shard.wte"}
// ZERO12-SAME: tensor<4096xf32> {llmc.state = "grad.shard.wte"}
// ZERO12-SAME: tensor<4096xf32> {llmc.state = "shard.adam_m.wte"}
// ZERO12-SAME: -> (tensor<f32> {llmc.output = "grad_norm"}, tensor<4096xf32> {llmc.output = "shard.wte", llmc.updates = "shard.wte"}
// ZERO12: %[[SUM:.*]] = llmc.all_reduce %{{.*}} sum on "dp" size 4 : tensor<f32>
// ZERO12-NEXT: llmc.sqrt %[[SUM]] : tensor<f32>
// ZERO12: llmc.all_gather %{{.*}} dim 0 on "dp" size 4 : tensor<30144xf32>
// @shard_init cuts the blocks from full tensors (a reduce-scatter (max) of
// identical tensors: an exact copy of the block).
// ZERO12-LABEL: func.func @shard_init(
// ZERO12-SAME: tensor<256x64xf32> {llmc.input = "adam_m.wte"}
// ZERO12: llmc.reduce_scatter %{{.*}} max dim 0 on "dp" size 4 : tensor<16384xf32>

// ZeRO-3: the parameters are blocks too (shard.<p>, no llmc.param left).
// The forward gathers them a unit at a time: the rest (embeddings, final
// norm: 5152 per rank), then each transformer block (12496), each gather
// issued one unit ahead (block 0's before the embedding reads wte); the
// backward (after the loss) gathers again. Gradients are reduce-scattered
// as in ZeRO-2; @update_step gathers nothing.
// ZERO3-LABEL: func.func @grad_step(
// ZERO3-NOT: llmc.param
// ZERO3-SAME: {llmc.state = "shard.wte"}
// ZERO3: %[[REST:.*]] = llmc.all_gather %{{.*}} dim 0 on "dp" size 4 : tensor<5152xf32>
// ZERO3: %[[H0:.*]] = llmc.all_gather %{{.*}} dim 0 on "dp" size 4 : tensor<12496xf32>
// ZERO3: llmc.embedding
// ZERO3: %[[H1:.*]] = llmc.all_gather %{{.*}} dim 0 on "dp" size 4 : tensor<12496xf32>
// ZERO3: llmc.cross_entropy
// ZERO3: llmc.all_gather %{{.*}} dim 0 on "dp" size 4 : tensor<5152xf32>
// ZERO3: llmc.all_gather %{{.*}} dim 0 on "dp" size 4 : tensor<12496xf32>
// ZERO3: llmc.all_gather %{{.*}} dim 0 on "dp" size 4 : tensor<12496xf32>
// ZERO3: llmc.reduce_scatter %{{.*}} avg dim 0 on "dp" size 4 {llmc.bucket = 0 : i64} : tensor<120576xf32>
// ZERO3-LABEL: func.func @update_step(
// ZERO3-NOT: llmc.param
// ZERO3-NOT: llmc.all_gather
// ZERO3-LABEL: func.func @shard_init(
// ZERO3-SAME: tensor<256x64xf32> {llmc.input = "wte"}

// A forward alone (a ZeRO-3 run's evaluation) is sharded the same way.
// FORWARD3-LABEL: func.func @forward(
// FORWARD3-SAME: {llmc.state = "shard.wte"}
// FORWARD3: llmc.all_gather %{{.*}} dim 0 on "dp" size 4 : tensor<5152xf32>

// ORDER: error: llmc-shard needs @grad_step and @update_step: run llmc-optimizer first
// DP0: error: llmc-shard: dp must be at least 1, got 0
// ZERO: error: llmc-shard: zero must be 0, 1, 2 or 3, got 4
// BUCKET: error: llmc-shard: bucket-mb must be positive, got 0
