// Included by quantize.wgsl and norm.wgsl (`//#include q8block`): the per-32-value block
// quantization of the int8-activation GEMV, for kernels where each thread holds four
// consecutive values of a block and the eight threads of a block use consecutive slots
// 8b .. 8b + 7 of the workgroup arrays (QWG slots, defined by the includer; every slot is
// written before it is read). d = max|x| / 127, q = round(x / d) half away from zero, as
// ggml's q8_1 and the CPU reference `quant::q8_activation_roundtrip` do; the block sum of q is
// an integer up to 32 · 127, exact in any order.

var<workgroup> q8_m: array<vec4<f32>, QWG / 4u>;
var<workgroup> q8_s: array<vec4<f32>, QWG / 4u>;

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

// Publishes max|x| of this thread's four values.
fn q8_put_max(slot: u32, x: vec4<f32>) {
    let a = abs(x);
    q8_m[slot >> 2u][slot & 3u] = max(max(a.x, a.y), max(a.z, a.w));
}

// (d, 1/d) of the block of `slot` (after a barrier that follows every q8_put_max).
fn q8_scale(slot: u32) -> vec2<f32> {
    let g = (slot >> 3u) * 2u;
    let m = max(q8_m[g], q8_m[g + 1u]);
    let d = div_rn(max(max(m.x, m.y), max(m.z, m.w)), 127.0);
    return vec2<f32>(d, select(0.0, div_rn(1.0, d), d != 0.0));
}

fn q8_round(x: vec4<f32>, id: f32) -> vec4<f32> {
    return round_away(x * id);
}

// Publishes the sum of this thread's four q.
fn q8_put_sum(slot: u32, q: vec4<f32>) {
    q8_s[slot >> 2u][slot & 3u] = (q.x + q.y) + (q.z + q.w);
}

// Σ q of the block of `slot` (after a barrier that follows every q8_put_sum).
fn q8_sum(slot: u32) -> f32 {
    let g = (slot >> 3u) * 2u;
    let s = q8_s[g] + q8_s[g + 1u];
    return (s.x + s.y) + (s.z + s.w);
}

// The whole quantization of this thread's four values (`slot`'s block as above): their packed
// int8 word and the block's (d, d · Σ q). Every thread of the workgroup must call it (two
// barriers); threads without values pass zeros and drop the result.
struct Q8Word {
    q: u32,
    d: vec2<f32>,
}
fn q8_word(slot: u32, x: vec4<f32>) -> Q8Word {
    q8_put_max(slot, x);
    workgroupBarrier();
    let dq = q8_scale(slot);
    let q = q8_round(x, dq.y);
    q8_put_sum(slot, q);
    workgroupBarrier();
    return Q8Word(pack4xI8(vec4<i32>(q)), vec2<f32>(dq.x, dq.x * q8_sum(slot)));
}
