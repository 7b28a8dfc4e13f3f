// Weight decoding, spliced into kernels by the generator (`//#dequant NAME` in a kernel).
// Every section is written once against the placeholders `$W` (the `array<u32>` storage
// buffer holding the raw weight bytes) and `$F` (a function-name prefix), so one matmul
// template serves every type. `$F_dq4(ro, e)` returns elements `e .. e + 4` (e a multiple of
// 4) of the row starting at byte `ro`; rows are whole blocks, so `$F_dq1(i)` (element `i` of
// the whole tensor) is `$F_dq4(0, ..)`. Arithmetic follows the CPU reference: each product in
// f32, in the same order.
//
// GEMV work items: `$F_item(ro, s, &v)` decodes item `s` (elements `s·$F_SUB ..`, `$F_SUB4`
// vec4s) of the row at byte `ro` into `v` and returns a scale the dot product is multiplied by
// (so a per-sub-block scale costs one multiply per item, not per element). Types with a fast
// item read whole words (one load per 4–8 weights, no per-element offset arithmetic); the
// generator gives every other type a 4-element item built on `$F_dq4` (section `item4`).
// `$F_init(tid)` fills workgroup tables (call it, then a barrier, before the first item).
//
// Layouts: IQ4_XS and Q8_0 reach their bytes through address helpers, from the section
// "<type> ggml" or from a re-layout's section (src/backend/wgpu/relayout.rs), in which `$W` is
// bound as `array<vec4<u32>>` and the byte helpers below read words through `$F_w`.

//! bytes
fn $F_u8(o: u32) -> u32 {
    return ($W[o >> 2u] >> ((o & 3u) * 8u)) & 0xffu;
}
// o must be even.
fn $F_u16(o: u32) -> u32 {
    return ($W[o >> 2u] >> ((o & 2u) * 8u)) & 0xffffu;
}
// Any byte offset: two words when unaligned.
fn $F_u32(o: u32) -> u32 {
    let s = (o & 3u) * 8u;
    let a = $W[o >> 2u];
    if s == 0u {
        return a;
    }
    return (a >> s) | ($W[(o >> 2u) + 1u] << (32u - s));
}
// IEEE half to f32 by bits: exact for every value (subnormals too), no f16 capability needed.
fn $F_h2f(h: u32) -> f32 {
    let s = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    // Selects, not branches: in a GEMV item the loads of the next rows stay in the same block.
    let sub = bitcast<u32>(f32(m) * 5.9604644775390625e-8);
    let big = select((e + 112u) << 23u, 0x7f800000u, e == 31u) | (m << 13u);
    return bitcast<f32>(s | select(big, sub, e == 0u));
}
fn $F_f16(o: u32) -> f32 {
    return $F_h2f($F_u16(o));
}
// The four bytes of `q` as unsigned values.
fn $F_bytes(q: u32) -> vec4<u32> {
    return vec4<u32>(q & 0xffu, (q >> 8u) & 0xffu, (q >> 16u) & 0xffu, q >> 24u);
}
// The low (shift 0) or high (shift 4) nibbles of the four bytes of `q`.
fn $F_nib(q: u32, shift: u32) -> vec4<f32> {
    return vec4<f32>((vec4<u32>(q) >> vec4<u32>(shift, 8u + shift, 16u + shift, 24u + shift)) & vec4<u32>(0xfu));
}
fn $F_dq1(i: u32) -> f32 {
    return $F_dq4(0u, i & ~3u)[i & 3u];
}
// The 8 words at byte `p` (any even offset): 9 aligned loads and a funnel shift when `p` is
// 2 mod 4 (32-element blocks and Q6_K blocks are only 2-byte aligned). Reads one word past
// the 32 bytes, which callers guarantee lies inside the block or the padded buffer.
fn $F_win8(p: u32) -> array<u32, 8> {
    let a = p >> 2u;
    let odd = (p & 2u) != 0u;
    var out: array<u32, 8>;
    var prev = $W[a];
    for (var i = 0u; i < 8u; i++) {
        let nx = $W[a + 1u + i];
        out[i] = select(prev, (prev >> 16u) | (nx << 16u), odd);
        prev = nx;
    }
    return out;
}

// The Q4_K/Q5_K block at byte b: (d · scale, dmin · min) of sub-block j, the 6-bit pairs
// unpacked from the 12 scale bytes at b + 4 as ggml's get_scale_min_k4 does.
fn $F_kdm(b: u32, j: u32) -> vec2<f32> {
    let s = b + 4u;
    var sm: vec2<u32>;
    if j < 4u {
        sm = vec2<u32>($F_u8(s + j) & 63u, $F_u8(s + j + 4u) & 63u);
    } else {
        let x = $F_u8(s + j + 4u);
        sm = vec2<u32>((x & 0xfu) | (($F_u8(s + j - 4u) >> 6u) << 4u), (x >> 4u) | (($F_u8(s + j) >> 6u) << 4u));
    }
    return vec2<f32>($F_f16(b), $F_f16(b + 2u)) * vec2<f32>(sm);
}

// Branch-free forms for the int8 GEMV items (every load of an item, and of the next rows'
// items, in one block; no function-local arrays indexed at run time).
// win8 as two vectors.
fn $F_win8v(p: u32) -> array<vec4<u32>, 2> {
    let a = p >> 2u;
    let v0 = vec4<u32>($W[a], $W[a + 1u], $W[a + 2u], $W[a + 3u]);
    let v1 = vec4<u32>($W[a + 4u], $W[a + 5u], $W[a + 6u], $W[a + 7u]);
    let v2 = $W[a + 8u];
    let odd = (p & 2u) != 0u;
    let n0 = vec4<u32>(v0.yzw, v1.x);
    let n1 = vec4<u32>(v1.yzw, v2);
    let h = vec4<u32>(16u);
    return array<vec4<u32>, 2>(select(v0, (v0 >> h) | (n0 << h), odd), select(v1, (v1 >> h) | (n1 << h), odd));
}
// kdm from the three scale words at b + 4 (b 4-aligned), selecting instead of branching.
fn $F_kdm8(b: u32, j: u32) -> vec2<f32> {
    let w = (b >> 2u) + 1u;
    let s0 = $W[w];
    let s1 = $W[w + 1u];
    let s2 = $W[w + 2u];
    let dm = $W[w - 1u];
    let sh = 8u * (j & 3u);
    // Bytes j & 3 of the three words: sc[j & 3], sc[4 + (j & 3)], sc[8 + (j & 3)].
    let a = (s0 >> sh) & 0xffu;
    let c = (s1 >> sh) & 0xffu;
    let e = (s2 >> sh) & 0xffu;
    // j < 4: (sc[j] & 63, sc[j + 4] & 63); else (sc[j + 4] & 15 | sc[j − 4] >> 6 << 4,
    // sc[j + 4] >> 4 | sc[j] >> 6 << 4) with sc[j − 4] = a, sc[j] = c, sc[j + 4] = e.
    let lo = vec2<u32>(a & 63u, c & 63u);
    let hi = vec2<u32>((e & 0xfu) | ((a >> 6u) << 4u), (e >> 4u) | ((c >> 6u) << 4u));
    let sm = select(hi, lo, j < 4u);
    return vec2<f32>($F_h2f(dm & 0xffffu), $F_h2f(dm >> 16u)) * vec2<f32>(sm);
}

//! item4
const $F_SUB: u32 = 4u;
const $F_SUB4: u32 = 1u;
fn $F_init(tid: u32) {}
fn $F_item(ro: u32, s: u32, v: ptr<function, array<vec4<f32>, $F_SUB4>>) -> f32 {
    (*v)[0] = $F_dq4(ro, s * 4u);
    return 1.0;
}

//! F32
fn $F_dq4(ro: u32, e: u32) -> vec4<f32> {
    let w = (ro >> 2u) + e;
    return vec4<f32>(bitcast<f32>($W[w]), bitcast<f32>($W[w + 1u]), bitcast<f32>($W[w + 2u]), bitcast<f32>($W[w + 3u]));
}

//! F16
fn $F_dq4(ro: u32, e: u32) -> vec4<f32> {
    let o = ro + e * 2u;
    if (o & 3u) == 0u {
        let a = $W[o >> 2u];
        let b = $W[(o >> 2u) + 1u];
        return vec4<f32>($F_h2f(a & 0xffffu), $F_h2f(a >> 16u), $F_h2f(b & 0xffffu), $F_h2f(b >> 16u));
    }
    return vec4<f32>($F_f16(o), $F_f16(o + 2u), $F_f16(o + 4u), $F_f16(o + 6u));
}

//! BF16
fn $F_dq4(ro: u32, e: u32) -> vec4<f32> {
    let o = ro + e * 2u;
    return vec4<f32>(bitcast<f32>($F_u16(o) << 16u), bitcast<f32>($F_u16(o + 2u) << 16u), bitcast<f32>($F_u16(o + 4u) << 16u), bitcast<f32>($F_u16(o + 6u) << 16u));
}

//! Q8_0
// Block `blk` of the row at byte `ro` (in the ggml layout) through the layout's `$F_d` (the
// scale's f16 bits), `$F_q8` (the 32 qs bytes as 8 words) and `$F_qw8` (qs word w < 8).
fn $F_dq4(ro: u32, e: u32) -> vec4<f32> {
    let blk = e >> 5u;
    let d = $F_h2f($F_d(ro, blk));
    let q = bitcast<vec4<i32>>($F_bytes($F_qw8(ro, blk, (e & 31u) >> 2u)) << vec4<u32>(24u)) >> vec4<u32>(24u);
    return vec4<f32>(q) * d;
}
const $F_SUB: u32 = 32u;
const $F_SUB4: u32 = 8u;
fn $F_init(tid: u32) {}
fn $F_item(ro: u32, s: u32, v: ptr<function, array<vec4<f32>, 8>>) -> f32 {
    let q = $F_q8(ro, s);
    for (var i = 0u; i < 8u; i++) {
        // The four bytes sign-extended by shifts.
        (*v)[i] = vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(q[i >> 2u][i & 3u]) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u));
    }
    return $F_h2f($F_d(ro, s));
}

//! Q8_0 ggml
// ggml's 34-byte blocks (f16 d, 32 qs bytes), 2-byte aligned: 9 word loads and a funnel shift.
fn $F_d(ro: u32, blk: u32) -> u32 {
    return $F_u16(ro + blk * 34u);
}
fn $F_q8(ro: u32, blk: u32) -> array<vec4<u32>, 2> {
    return $F_win8v(ro + blk * 34u + 2u);
}
fn $F_qw8(ro: u32, blk: u32, w: u32) -> u32 {
    return $F_u32(ro + blk * 34u + 2u + 4u * w);
}

//! Q8_0 groups
// Blocks re-laid at upload in groups of 8 (`relayout::q8_0_groups`): 272 bytes [d0 … d7]
// [qs0] … [qs7], the buffer bound as vec4s: a block's qs are two 16-byte loads, where the
// ggml layout's 2-byte alignment needs nine word loads and funnel shifts. Block g of the
// buffer: `ro` still counts ggml bytes, whole 34-byte blocks a row.
fn $F_d(ro: u32, blk: u32) -> u32 {
    let g = ro / 34u + blk;
    let j = g & 7u;
    return ($W[(g >> 3u) * 17u][j >> 1u] >> (16u * (j & 1u))) & 0xffffu;
}
fn $F_q8(ro: u32, blk: u32) -> array<vec4<u32>, 2> {
    let g = ro / 34u + blk;
    let q = (g >> 3u) * 17u + 1u + 2u * (g & 7u);
    return array<vec4<u32>, 2>($W[q], $W[q + 1u]);
}
fn $F_qw8(ro: u32, blk: u32, w: u32) -> u32 {
    let g = ro / 34u + blk;
    return $W[(g >> 3u) * 17u + 1u + 2u * (g & 7u) + (w >> 2u)][w & 3u];
}

//! Q4_0
fn $F_dq4(ro: u32, e: u32) -> vec4<f32> {
    let b = ro + (e >> 5u) * 18u;
    let j = e & 31u;
    let d = $F_f16(b);
    let q = $F_nib($F_u32(b + 2u + (j & 15u)), select(0u, 4u, j >= 16u));
    return (q - 8.0) * d;
}

//! Q4_1
fn $F_dq4(ro: u32, e: u32) -> vec4<f32> {
    let b = ro + (e >> 5u) * 20u;
    let j = e & 31u;
    let d = $F_f16(b);
    let m = $F_f16(b + 2u);
    let q = $F_nib($F_u32(b + 4u + (j & 15u)), select(0u, 4u, j >= 16u));
    return q * d + m;
}

//! Q5_0
fn $F_dq4(ro: u32, e: u32) -> vec4<f32> {
    let b = ro + (e >> 5u) * 22u;
    let j = e & 31u;
    let d = $F_f16(b);
    let qh = $F_u32(b + 2u);
    let lo = $F_nib($F_u32(b + 6u + (j & 15u)), select(0u, 4u, j >= 16u));
    let hi = vec4<f32>((vec4<u32>(qh) >> vec4<u32>(j, j + 1u, j + 2u, j + 3u)) & vec4<u32>(1u)) * 16.0;
    return (lo + hi - 16.0) * d;
}

//! Q5_1
fn $F_dq4(ro: u32, e: u32) -> vec4<f32> {
    let b = ro + (e >> 5u) * 24u;
    let j = e & 31u;
    let d = $F_f16(b);
    let m = $F_f16(b + 2u);
    let qh = $F_u32(b + 4u);
    let lo = $F_nib($F_u32(b + 8u + (j & 15u)), select(0u, 4u, j >= 16u));
    let hi = vec4<f32>((vec4<u32>(qh) >> vec4<u32>(j, j + 1u, j + 2u, j + 3u)) & vec4<u32>(1u)) * 16.0;
    return (lo + hi) * d + m;
}

//! iq4 grid
// The 16-value grid of IQ4_NL and IQ4_XS (spliced before either type's section).
// kv[n] as an int8 byte (n < 16) from the grid packed four to a word: registers only (a
// private array indexed at run time may live in memory).
fn $F_kvb(n: u32) -> u32 {
    let w = select(select(0xbfad9881u, 0xf6eaddcfu, (n & 4u) != 0u), select(0x26190d01u, 0x71594535u, (n & 4u) != 0u), n >= 8u);
    return (w >> (8u * (n & 3u))) & 0xffu;
}
// kv[n] as f32, from registers. The f32 decode used to index a `var<private>` copy of the
// grid, which NVIDIA's driver keeps per invocation in local memory: a memory load for every
// weight of the tiled and cooperative-matrix kernels.
fn $F_kvf(n: u32) -> f32 {
    return f32(bitcast<i32>($F_kvb(n) << 24u) >> 24u);
}

//! IQ4_NL
fn $F_dq4(ro: u32, e: u32) -> vec4<f32> {
    let b = ro + (e >> 5u) * 18u;
    let j = e & 31u;
    let d = $F_f16(b);
    let q = $F_u32(b + 2u + (j & 15u)) >> select(0u, 4u, j >= 16u);
    return d * vec4<f32>($F_kvf(q & 0xfu), $F_kvf((q >> 8u) & 0xfu), $F_kvf((q >> 16u) & 0xfu), $F_kvf((q >> 24u) & 0xfu));
}

//! IQ4_XS
// Block `blk` of the row at byte `ro` (in the ggml layout) through the layout's `$F_hdr`
// (words 0 and 1: d | scales_h << 16, scales_l), `$F_qs` (sub-block ib's 16 qs bytes) and
// `$F_qw` (qs word w < 32).
fn $F_dq4(ro: u32, e: u32) -> vec4<f32> {
    let blk = e >> 8u;
    let i = e & 255u;
    let ib = i >> 5u;
    let j = i & 31u;
    let h = $F_hdr(ro, blk);
    let lo = (h.y >> (4u * ib)) & 0xfu;
    let hi = (h.x >> (16u + 2u * ib)) & 3u;
    let dl = $F_h2f(h.x & 0xffffu) * f32(i32(lo | (hi << 4u)) - 32);
    let q = $F_qw(ro, blk, 4u * ib + ((j & 15u) >> 2u)) >> select(0u, 4u, j >= 16u);
    return dl * vec4<f32>($F_kvf(q & 0xfu), $F_kvf((q >> 8u) & 0xfu), $F_kvf((q >> 16u) & 0xfu), $F_kvf((q >> 24u) & 0xfu));
}
const $F_SUB: u32 = 32u;
const $F_SUB4: u32 = 8u;
// The grid in workgroup memory: 16 words, so lanes never conflict on a bank.
var<workgroup> $F_KT: array<f32, 16>;
fn $F_init(tid: u32) {
    if tid < 16u {
        $F_KT[tid] = $F_kvf(tid);
    }
}
fn $F_kv4(q: u32) -> vec4<f32> {
    return vec4<f32>($F_KT[q & 0xfu], $F_KT[(q >> 8u) & 0xfu], $F_KT[(q >> 16u) & 0xfu], $F_KT[(q >> 24u) & 0xfu]);
}
// Sub-block `s & 7` of block `s >> 3`. Byte j of its qs holds element j (low nibble) and
// j + 16 (high).
fn $F_item(ro: u32, s: u32, v: ptr<function, array<vec4<f32>, 8>>) -> f32 {
    let ib = s & 7u;
    let h = $F_hdr(ro, s >> 3u);
    let ls = (h.y >> (4u * ib)) & 0xfu;
    let hs = (h.x >> (16u + 2u * ib)) & 3u;
    let dl = $F_h2f(h.x & 0xffffu) * f32(i32(ls | (hs << 4u)) - 32);
    let q = $F_qs(ro, s >> 3u, ib);
    for (var i = 0u; i < 4u; i++) {
        (*v)[i] = $F_kv4(q[i]);
        (*v)[i + 4u] = $F_kv4(q[i] >> 4u);
    }
    return dl;
}

//! IQ4_XS ggml
// ggml's block layout: 136 bytes (d, scales_h, scales_l, 128 qs bytes), 8-byte aligned.
fn $F_hdr(ro: u32, blk: u32) -> vec2<u32> {
    let b = (ro >> 2u) + blk * 34u;
    return vec2<u32>($W[b], $W[b + 1u]);
}
fn $F_qs(ro: u32, blk: u32, ib: u32) -> vec4<u32> {
    let q0 = (ro >> 2u) + blk * 34u + 2u + 4u * ib;
    return vec4<u32>($W[q0], $W[q0 + 1u], $W[q0 + 2u], $W[q0 + 3u]);
}
fn $F_qw(ro: u32, blk: u32, w: u32) -> u32 {
    return $W[(ro >> 2u) + blk * 34u + 2u + w];
}

//! IQ4_XS pairs
// Blocks re-laid at upload in pairs (`relayout::iq4_xs_pairs`): 272 bytes [h0 l0 h1 l1]
// [qs0][qs1], the buffer bound as vec4s. A warp's qs reads are then one 16-byte load a lane,
// contiguous across lanes, where the ggml layout needs four word loads at a 16-byte stride.
// Block g of the buffer: `ro` still counts ggml bytes, whole 136-byte blocks a row.
fn $F_hdr(ro: u32, blk: u32) -> vec2<u32> {
    let g = ro / 136u + blk;
    let v = $W[(g >> 1u) * 17u];
    return select(v.xy, v.zw, (g & 1u) != 0u);
}
fn $F_qs(ro: u32, blk: u32, ib: u32) -> vec4<u32> {
    let g = ro / 136u + blk;
    return $W[(g >> 1u) * 17u + 1u + 8u * (g & 1u) + ib];
}
fn $F_qw(ro: u32, blk: u32, w: u32) -> u32 {
    let g = ro / 136u + blk;
    return $W[(g >> 1u) * 17u + 1u + 8u * (g & 1u) + (w >> 2u)][w & 3u];
}

//! Q4_K
fn $F_dq4(ro: u32, e: u32) -> vec4<f32> {
    let b = ro + (e >> 8u) * 144u;
    let i = e & 255u;
    let k = i >> 6u;
    let l = i & 63u;
    let sub = 2u * k + select(0u, 1u, l >= 32u);
    let dm = $F_kdm(b, sub);
    let q = $F_nib($F_u32(b + 16u + 32u * k + (l & 31u)), select(0u, 4u, l >= 32u));
    return dm.x * q - dm.y;
}
const $F_SUB: u32 = 32u;
const $F_SUB4: u32 = 8u;
fn $F_init(tid: u32) {}
// Sub-block j = s & 7 (one scale/min pair): 8 aligned qs words (blocks are 16-byte aligned).
fn $F_item(ro: u32, s: u32, v: ptr<function, array<vec4<f32>, 8>>) -> f32 {
    let b = ro + (s >> 3u) * 144u;
    let j = s & 7u;
    let dm = $F_kdm(b, j);
    let q0 = (b >> 2u) + 4u + 8u * (j >> 1u);
    let sh = 4u * (j & 1u);
    for (var i = 0u; i < 8u; i++) {
        (*v)[i] = dm.x * $F_nib($W[q0 + i], sh) - dm.y;
    }
    return 1.0;
}

//! Q5_K
fn $F_dq4(ro: u32, e: u32) -> vec4<f32> {
    let b = ro + (e >> 8u) * 176u;
    let i = e & 255u;
    let k = i >> 6u;
    let l = i & 63u;
    let sub = 2u * k + select(0u, 1u, l >= 32u);
    let dm = $F_kdm(b, sub);
    let lo = $F_nib($F_u32(b + 48u + 32u * k + (l & 31u)), select(0u, 4u, l >= 32u));
    let h = $F_bytes($F_u32(b + 16u + (l & 31u)));
    let hi = vec4<f32>((h >> vec4<u32>(sub)) & vec4<u32>(1u)) * 16.0;
    return dm.x * (lo + hi) - dm.y;
}
const $F_SUB: u32 = 32u;
const $F_SUB4: u32 = 8u;
fn $F_init(tid: u32) {}
// Sub-block j = s & 7: 8 aligned qs words and the 8 qh words (bit j of each byte).
fn $F_item(ro: u32, s: u32, v: ptr<function, array<vec4<f32>, 8>>) -> f32 {
    let b = ro + (s >> 3u) * 176u;
    let j = s & 7u;
    let dm = $F_kdm(b, j);
    let qh0 = (b >> 2u) + 4u;
    let q0 = (b >> 2u) + 12u + 8u * (j >> 1u);
    let sh = 4u * (j & 1u);
    for (var i = 0u; i < 8u; i++) {
        let hi = vec4<f32>(($F_bytes($W[qh0 + i]) >> vec4<u32>(j)) & vec4<u32>(1u)) * 16.0;
        (*v)[i] = dm.x * ($F_nib($W[q0 + i], sh) + hi) - dm.y;
    }
    return 1.0;
}

//! Q6_K
fn $F_dq4(ro: u32, e: u32) -> vec4<f32> {
    let b = ro + (e >> 8u) * 210u;
    let i = e & 255u;
    let half = i >> 7u;
    let r = i & 127u;
    let qi = r >> 5u;
    let l = r & 31u;
    let lo = $F_nib($F_u32(b + 64u * half + l + 32u * (qi & 1u)), 4u * (qi >> 1u));
    let hi = vec4<f32>(($F_bytes($F_u32(b + 128u + 32u * half + l)) >> vec4<u32>(2u * qi)) & vec4<u32>(3u)) * 16.0;
    let sc = f32((i32($F_u8(b + 192u + 8u * half + 2u * qi + (l >> 4u))) << 24u) >> 24u);
    let ds = $F_f16(b + 208u) * sc;
    return ds * (lo + hi - 32.0);
}
const $F_SUB: u32 = 32u;
const $F_SUB4: u32 = 8u;
fn $F_init(tid: u32) {}
// Item j = s & 7 of a block: half j >> 2, quarter qi = j & 3, 32 elements l with ql byte
// 64·half + 32·(qi & 1) + l (nibble qi >> 1), qh byte 128 + 32·half + l (bits 2·qi) and
// scale 8·half + 2·qi + l / 16. Blocks are 2-byte aligned: words through `win8`.
fn $F_item(ro: u32, s: u32, v: ptr<function, array<vec4<f32>, 8>>) -> f32 {
    let b = ro + (s >> 3u) * 210u;
    let j = s & 7u;
    let half = j >> 2u;
    let qi = j & 3u;
    let ql = $F_win8(b + 64u * half + 32u * (qi & 1u));
    let qh = $F_win8(b + 128u + 32u * half);
    let scs = $F_u16(b + 192u + 8u * half + 2u * qi);
    let sc0 = f32((i32(scs) << 24u) >> 24u);
    let sc1 = f32((i32(scs) << 16u) >> 24u);
    let sl = 4u * (qi >> 1u);
    for (var i = 0u; i < 8u; i++) {
        let lo = (vec4<u32>(ql[i]) >> vec4<u32>(sl, sl + 8u, sl + 16u, sl + 24u)) & vec4<u32>(0xfu);
        let hi = ($F_bytes(qh[i]) >> vec4<u32>(2u * qi)) & vec4<u32>(3u);
        (*v)[i] = (vec4<f32>(lo | (hi << vec4<u32>(4u))) - 32.0) * select(sc1, sc0, i < 4u);
    }
    return $F_f16(b + 208u);
}

// Int8 work items for the Q8 GEMV (`//#dequant8 NAME`, spliced after the type's own section):
// `$F_qitem(ro, s, &w)` decodes item s (32 values, one activation block) of the row at byte ro
// to packed int8 words (value e in byte e % 4 of word e / 4) and returns (s0, s1, m): the
// item's dot product with int8 activations q of scale xd and scaled sum xs is
//   xd · (s0 · Σ_{e<16} w_e q_e + s1 · Σ_{e≥16} w_e q_e) + m · xs.
// `$F_qinit(tid)` fills workgroup tables (then a barrier).

//! Q8_0 q8
fn $F_qinit(tid: u32) {}
fn $F_qitem(ro: u32, s: u32) -> QItem {
    let w = $F_q8(ro, s);
    let d = $F_h2f($F_d(ro, s));
    return QItem(w[0], w[1], vec3<f32>(d, d, 0.0));
}

//! IQ4_XS q8
// The grid lookups are `$F_lut_lo` (low nibbles of the four bytes of q) and `$F_lut_hi` (q >> 4),
// from the section `DELTASPEC_WGPU_IQ4_LOOKUP` picks (shaders::iq4_lookup): workgroup-memory
// table (default), register selects, or the table for one half and selects for the other (both
// the load/store and the ALU pipe busy).
fn $F_qitem(ro: u32, s: u32) -> QItem {
    let ib = s & 7u;
    let h = $F_hdr(ro, s >> 3u);
    let q = $F_qs(ro, s >> 3u, ib);
    let ls = (h.y >> (4u * ib)) & 0xfu;
    let hs = (h.x >> (16u + 2u * ib)) & 3u;
    let dl = $F_h2f(h.x & 0xffffu) * f32(i32(ls | (hs << 4u)) - 32);
    let lo = vec4<u32>($F_lut_lo(q.x), $F_lut_lo(q.y), $F_lut_lo(q.z), $F_lut_lo(q.w));
    let hi = vec4<u32>($F_lut_hi(q.x >> 4u), $F_lut_hi(q.y >> 4u), $F_lut_hi(q.z >> 4u), $F_lut_hi(q.w >> 4u));
    return QItem(lo, hi, vec3<f32>(dl, dl, 0.0));
}

//! IQ4_XS q8 grid
// The grid as int8 bytes pre-shifted to each byte position: KB[16p + i] = kv[i] << 8p, so a
// word of four looked-up values is four loads or-ed (no per-value shift).
var<workgroup> $F_KB: array<u32, 64>;
fn $F_qinit(tid: u32) {
    // Every GEMV workgroup has at least 32 threads.
    if tid < 32u {
        for (var i = tid; i < 64u; i += 32u) {
            $F_KB[i] = $F_kvb(i & 15u) << (8u * (i >> 4u));
        }
    }
}
// Nibbles 0 .. 3 of the four bytes of q through the table.
fn $F_kb4(q: u32) -> u32 {
    return $F_KB[q & 0xfu] | $F_KB[16u + ((q >> 8u) & 0xfu)] | $F_KB[32u + ((q >> 16u) & 0xfu)] | $F_KB[48u + ((q >> 24u) & 0xfu)];
}

//! IQ4_XS q8 selects
// Nibbles 0 .. 3 of the four bytes of q through selects on the packed grid (no memory).
fn $F_ka4(q: u32) -> u32 {
    return $F_kvb(q & 0xfu) | ($F_kvb((q >> 8u) & 0xfu) << 8u) | ($F_kvb((q >> 16u) & 0xfu) << 16u) | ($F_kvb((q >> 24u) & 0xfu) << 24u);
}

//! IQ4_XS q8 table
fn $F_lut_lo(q: u32) -> u32 {
    return $F_kb4(q);
}
fn $F_lut_hi(q: u32) -> u32 {
    return $F_kb4(q);
}

//! IQ4_XS q8 alu
fn $F_lut_lo(q: u32) -> u32 {
    return $F_ka4(q);
}
fn $F_lut_hi(q: u32) -> u32 {
    return $F_ka4(q);
}

//! IQ4_XS q8 mix
fn $F_lut_lo(q: u32) -> u32 {
    return $F_kb4(q);
}
fn $F_lut_hi(q: u32) -> u32 {
    return $F_ka4(q);
}

//! Q4_K q8
fn $F_qinit(tid: u32) {}
fn $F_qitem(ro: u32, s: u32) -> QItem {
    let b = ro + (s >> 3u) * 144u;
    let j = s & 7u;
    let q0 = (b >> 2u) + 4u + 8u * (j >> 1u);
    let v0 = vec4<u32>($W[q0], $W[q0 + 1u], $W[q0 + 2u], $W[q0 + 3u]);
    let v1 = vec4<u32>($W[q0 + 4u], $W[q0 + 5u], $W[q0 + 6u], $W[q0 + 7u]);
    let dm = $F_kdm8(b, j);
    let sh = vec4<u32>(4u * (j & 1u));
    let m = vec4<u32>(0x0f0f0f0fu);
    return QItem((v0 >> sh) & m, (v1 >> sh) & m, vec3<f32>(dm.x, dm.x, -dm.y));
}

//! Q5_K q8
fn $F_qinit(tid: u32) {}
fn $F_qitem(ro: u32, s: u32) -> QItem {
    let b = ro + (s >> 3u) * 176u;
    let j = s & 7u;
    let qh0 = (b >> 2u) + 4u;
    let q0 = (b >> 2u) + 12u + 8u * (j >> 1u);
    let v0 = vec4<u32>($W[q0], $W[q0 + 1u], $W[q0 + 2u], $W[q0 + 3u]);
    let v1 = vec4<u32>($W[q0 + 4u], $W[q0 + 5u], $W[q0 + 6u], $W[q0 + 7u]);
    let h0 = vec4<u32>($W[qh0], $W[qh0 + 1u], $W[qh0 + 2u], $W[qh0 + 3u]);
    let h1 = vec4<u32>($W[qh0 + 4u], $W[qh0 + 5u], $W[qh0 + 6u], $W[qh0 + 7u]);
    let dm = $F_kdm8(b, j);
    let sh = vec4<u32>(4u * (j & 1u));
    let hj = vec4<u32>(j);
    let m = vec4<u32>(0x0f0f0f0fu);
    let one = vec4<u32>(0x01010101u);
    let w0 = ((v0 >> sh) & m) | (((h0 >> hj) & one) << vec4<u32>(4u));
    let w1 = ((v1 >> sh) & m) | (((h1 >> hj) & one) << vec4<u32>(4u));
    return QItem(w0, w1, vec3<f32>(dm.x, dm.x, -dm.y));
}

//! Q6_K q8
fn $F_qinit(tid: u32) {}
// The 6-bit values of ql/qh words made signed (q − 32) bytewise: setting each byte's top bit
// first keeps the borrow from crossing bytes.
fn $F_six(l: vec4<u32>, h: vec4<u32>, sl: vec4<u32>, sh: vec4<u32>) -> vec4<u32> {
    let v = ((l >> sl) & vec4<u32>(0x0f0f0f0fu)) | (((h >> sh) & vec4<u32>(0x03030303u)) << vec4<u32>(4u));
    return ((v | vec4<u32>(0x80808080u)) - vec4<u32>(0x20202020u)) ^ vec4<u32>(0x80808080u);
}
// Item layout as in the Q6_K section.
fn $F_qitem(ro: u32, s: u32) -> QItem {
    let b = ro + (s >> 3u) * 210u;
    let j = s & 7u;
    let half = j >> 2u;
    let qi = j & 3u;
    let ql = $F_win8v(b + 64u * half + 32u * (qi & 1u));
    let qh = $F_win8v(b + 128u + 32u * half);
    let scs = $F_u16(b + 192u + 8u * half + 2u * qi);
    let d = $F_f16(b + 208u);
    let sl = vec4<u32>(4u * (qi >> 1u));
    let sh = vec4<u32>(2u * qi);
    let lo = $F_six(ql[0], qh[0], sl, sh);
    let hi = $F_six(ql[1], qh[1], sl, sh);
    return QItem(lo, hi, vec3<f32>(d * f32((i32(scs) << 24u) >> 24u), d * f32((i32(scs) << 16u) >> 24u), 0.0));
}
