// Activations to int8 for the int8-activation GEMV (matmul.wgsl with Q8): per 32 consecutive
// values d = max|x| / 127, q = round(x / d) (half away from zero), as ggml's q8_1 and the CPU
// reference `quant::q8_activation_roundtrip` do. XQ holds the q as packed int8 (value e of a
// block in byte e % 4 of word e / 4), XD per block (d, d · Σ q) (the sum serves formats with a
// per-block minimum). One thread per block: blocks are independent, and the kernel is a small
// fraction of a GEMV's time (it reads x once, the GEMV reads every weight).
// Flags: XGATE (x is read as x · sigmoid(G): the attention output gate, folded in before
// quantization). Params: 0 blocks (N·K/32), 1 threads per grid row.

@group(0) @binding(#) var<storage, read> X: array<vec4<f32>>;
//#if XGATE
@group(0) @binding(#) var<storage, read> G: array<vec4<f32>>;
//#endif
@group(0) @binding(#) var<storage, read_write> XQ: array<u32>;
@group(0) @binding(#) var<storage, read_write> XD: array<vec2<f32>>;

// a / b correctly rounded (the CPU reference divides in IEEE f32; Vulkan allows division a few
// ulp off, which would move values across rounding boundaries): one residual correction.
fn div_rn(a: f32, b: f32) -> f32 {
    let q = a / b;
    return fma(fma(-q, b, a), 1.0 / b, q);
}

// Round half away from zero (Rust's f32::round; WGSL's round() goes to even). v − trunc(v) is
// exact for every f32.
fn round_away(v: vec4<f32>) -> vec4<f32> {
    let t = trunc(v);
    return t + select(vec4<f32>(0.0), sign(v), abs(v - t) >= vec4<f32>(0.5));
}

fn load(i: u32) -> vec4<f32> {
//#if XGATE
    return X[i] * (1.0 / (1.0 + exp(-G[i])));
//#else
    return X[i];
//#endif
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let b = gid.x + gid.y * pu(1u);
    if b >= pu(0u) {
        return;
    }
    var x: array<vec4<f32>, 8>;
    var amax = vec4<f32>(0.0);
    for (var i = 0u; i < 8u; i++) {
        x[i] = load(8u * b + i);
        amax = max(amax, abs(x[i]));
    }
    let d = div_rn(max(max(amax.x, amax.y), max(amax.z, amax.w)), 127.0);
    let id = select(0.0, div_rn(1.0, d), d != 0.0);
    var s = vec4<f32>(0.0);
    for (var i = 0u; i < 8u; i++) {
        let q = round_away(x[i] * id);
        s += q;
        XQ[8u * b + i] = pack4xI8(vec4<i32>(q));
    }
    // Integer sums up to 32 · 127: exact in any order.
    XD[b] = vec2<f32>(d, d * ((s.x + s.y) + (s.z + s.w)));
}
