// Activations to int8 for the int8-activation GEMV (matmul.wgsl with Q8): per 32 consecutive
// values d = max|x| / 127, q = round(x / d) (half away from zero), as ggml's q8_1 and the CPU
// reference `quant::q8_activation_roundtrip` do. XQ holds the q as packed int8 (value e of a
// block in byte e % 4 of word e / 4), XD per block (d, d · Σ q) (the sum serves formats with a
// per-block minimum).
// One thread per four values (one XQ word), eight threads per block: every thread issues a
// single coalesced vec4 load, so the kernel costs one memory round trip (the former
// one-thread-per-block form looped over its block's eight loads one after another). The eight
// threads of a block exchange their maxima and sums through workgroup memory (no assumption on
// subgroup size or layout). The block-quantization functions live in q8block.wgsl and are
// shared with the fused norm+quantize (norm.wgsl with Q8), so both round identically.
// Flags: XGATE (x is read as x · sigmoid(G): the attention output gate, folded in before
// quantization). Params: 0 blocks (N·K/32), 1 threads per grid row.

@group(0) @binding(#) var<storage, read> X: array<vec4<f32>>;
//#if XGATE
@group(0) @binding(#) var<storage, read> G: array<vec4<f32>>;
//#endif
@group(0) @binding(#) var<storage, read_write> XQ: array<u32>;
@group(0) @binding(#) var<storage, read_write> XD: array<vec2<f32>>;

const QWG: u32 = 64u;
//#include q8block

fn load(i: u32) -> vec4<f32> {
//#if XGATE
    return X[i] * (1.0 / (1.0 + exp(-G[i])));
//#else
    return X[i];
//#endif
}

@compute @workgroup_size(64)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    // Vector (word) index; blocks are whole in every workgroup (64 = 8 blocks of 8 threads).
    let v = gid.x + gid.y * pu(1u);
    let live = v < 8u * pu(0u);
    var x = vec4<f32>(0.0);
    if live {
        x = load(v);
    }
    let w = q8_word(tid, x);
    if live {
        XQ[v] = w.q;
        if (tid & 7u) == 0u {
            XD[v / 8u] = w.d;
        }
    }
}
