// One output of the K = 4 causal depthwise conv + SiLU: taps w0..w3 over the window (h0, h1, h2
// oldest first, then the new input x), in conv_step's order of products and sums. Shared by
// conv_step (hip/conv.hip) and the 1-row projection group that folds the DeltaNet conv into its
// epilogue (hip/qmatmul.hip), so both give the same bits.
#pragma once
#include "common.h"

DEV float conv4_silu(float w0, float w1, float w2, float w3, float h0, float h1, float h2, float x) {
    float acc = 0.0f;
    acc += w0 * h0;
    acc += w1 * h1;
    acc += w2 * h2;
    acc += w3 * x;
    return ds_silu(acc);
}
