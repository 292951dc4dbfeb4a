// RUN: llmc compile %llmc_src/examples/tiny.yaml --batch 2 --seq-len 16 \
// RUN:   --function grad_step --compile-to=kernels | FileCheck %s

// Tests that the training step sums each weight gradient straight into its
// persistent buffer (`llmc.updates` grad.<p> = grad.<p> + dW): the GEMM
// dW = dY^T X (over the B*T rows, A transposed) runs with beta = 1 and C
// the state, with no arena buffer for dW, no epilogue add and no copy
// back. grad.wte of the tied embedding sums two terms: the embedding
// gradient adds into the state first (no zero fill), then the logits' dW.
// test/unit/codegen/LlmcToKernel/AccumulateTest.cpp has the unfused forms,
// a state read later (not accumulated) and the numbers.

// CHECK: state grad.wte: buffer [[$WTE:[0-9]+]]
// CHECK: state grad.h.0.attn.c_attn.weight: buffer [[$QKV:[0-9]+]]
// CHECK: state grad.h.1.mlp.c_proj.weight: buffer [[$PROJ:[0-9]+]]
// CHECK-NOT: arena {{.*}} embedding_grad

// Each dW GEMM runs where its product is in the backward sweep (block 1's
// before block 0's), not with the accumulating adds at the end of the
// step, so that its operands die early; grad.wte's waits for the
// embedding gradient it is summed with.
// CHECK-LABEL: schedule:
// CHECK: gemm batch 1 m 64 n 256 k 32 transA {{.*}} C=buffer [[$PROJ]]+0 [16384, 256, 1] accumulate // matmul_add
// CHECK: gemm batch 1 m 192 n 64 k 32 transA {{.*}} C=buffer [[$QKV]]+0 [12288, 64, 1] accumulate // matmul_add
// CHECK: embedding_grad positions 32 rows 256 channels 64 {{.*}} out=buffer [[$WTE]]+0 [64, 1] accumulate
// CHECK: gemm batch 1 m 256 n 64 k 32 transA {{.*}} C=buffer [[$WTE]]+0 [16384, 64, 1] accumulate // matmul_add_add
// CHECK-NOT: epilogue
// CHECK-NOT: update grad
// CHECK-LABEL: kernels:
