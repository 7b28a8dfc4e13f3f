// GQA attention over a KV cache (rows [cap, nkv, hd]), causal or not.
// `write_kv` stores the new k/v rows at their positions. `attn` runs one workgroup per
// (split, head, token): the split takes its share of the keys 0 ..= pos[t], scores WG keys at
// a time (their rows staged in workgroup memory) and keeps an online softmax (running max m, sum l, output o
// with HD_PT dims per thread). With one split (FINAL) it writes o / l; otherwise it writes
// (o, m, l) to the partial buffer and `combine` merges the splits.
// Params: 0 T, 1 nh, 2 nkv, 3 hd, 4 cap, 5 splits, 6 scale (f32), 7 write_kv threads per grid
// row, 8 mask (0 causal, 1 non-causal, 2 tree), 9 window (non-causal; 0 = unlimited).
// TREE (graph op AttentionTree, mode 2): the new rows are consecutive from Pos[0]; query t
// sees rows 0 .. Pos[0] and the new rows Pos[0] + j with Mask[t·T + j] != 0 (j ≤ t, so within
// the causal range); hidden rows get weight 0.
// Q8 (entries writing the output: attn with FINAL, combine): the output times sigmoid(G) (the
// attention output gate) is also quantized for o_proj's int8 GEMV (hd % 32 == 0), replacing
// the quantize dispatch.

@group(0) @binding(1) var<storage, read> Q: array<f32>;
@group(0) @binding(2) var<storage, read> K: array<f32>;
@group(0) @binding(3) var<storage, read> V: array<f32>;
@group(0) @binding(4) var<storage, read> Pos: array<i32>;
@group(0) @binding(5) var<storage, read_write> KC: array<f32>;
@group(0) @binding(6) var<storage, read_write> VC: array<f32>;
@group(0) @binding(7) var<storage, read_write> Part: array<f32>;
@group(0) @binding(8) var<storage, read_write> Out: array<f32>;
//#if TREE
@group(0) @binding(9) var<storage, read> Mask: array<i32>;
//#endif
//#if Q8
//#if TREE
@group(0) @binding(10) var<storage, read> G: array<f32>;
@group(0) @binding(11) var<storage, read_write> XQ: array<u32>;
@group(0) @binding(12) var<storage, read_write> XD: array<vec2<f32>>;
//#else
@group(0) @binding(9) var<storage, read> G: array<f32>;
@group(0) @binding(10) var<storage, read_write> XQ: array<u32>;
@group(0) @binding(11) var<storage, read_write> XD: array<vec2<f32>>;
//#endif
// Only div_rn and round_away are used here.
const QWG: u32 = 8u;
//#include q8block
// The head's gated output, for its quantization.
var<workgroup> ys: array<f32, HD_MAX>;

// The output row at element `base` (hd values, every thread's share of them in ys), times
// sigmoid(G), quantized for the int8 GEMV of o_proj exactly as quantize.wgsl with XGATE does:
// per 32 values d = max|y| / 127, q = round(y / d); XQ packed int8, XD (d, d · Σ q). One
// thread per block.
fn q8_row(base: u32, hd: u32, tid: u32) {
    workgroupBarrier();
    for (var b = tid; b < hd / 32u; b += WG) {
        let o = b * 32u;
        var m = 0.0;
        for (var e = 0u; e < 32u; e++) {
            m = max(m, abs(ys[o + e]));
        }
        let d = div_rn(m, 127.0);
        let id = select(0.0, div_rn(1.0, d), d != 0.0);
        var sum = 0.0;
        for (var w = 0u; w < 8u; w++) {
            let e = o + 4u * w;
            let q = q8_round(vec4<f32>(ys[e], ys[e + 1u], ys[e + 2u], ys[e + 3u]), id);
            sum += (q.x + q.y) + (q.z + q.w);
            XQ[(base + e) / 4u] = pack4xI8(vec4<i32>(q));
        }
        XD[(base + o) / 32u] = vec2<f32>(d, d * sum);
    }
}

// Output element i (row-major [T, nh, hd]), with its gated value kept for q8_row.
fn put(i: u32, d: u32, v: f32) {
    Out[i] = v;
    ys[d] = v * (1.0 / (1.0 + exp(-G[i])));
}
//#else
fn put(i: u32, d: u32, v: f32) {
    Out[i] = v;
}
//#endif

const NEG: f32 = -3.0e38;

var<workgroup> qsh: array<f32, HD_MAX>;
var<workgroup> sc: array<f32, WG>;
// Dims of the key rows staged at a time by attn (rows padded by one: distinct banks).
const KS: u32 = 32u;
var<workgroup> ksl: array<f32, WG * (KS + 1u)>;

// The cache rows lo .. hi query t sees, clamped to the cache. Causal (mode 0): 0 ..= pos[t].
// Non-causal (mode 1): 0 ..= max(pos), within |pos[t] − j| ≤ window when window > 0.
// Whether query t sees cache row j of its range (only trees hide rows inside it).
fn sees(t: u32, j: u32) -> bool {
//#if TREE
    let base = u32(Pos[0]);
    return j < base || Mask[t * pu(0u) + (j - base)] != 0;
//#else
    return true;
//#endif
}

fn visible(t: u32) -> vec2<u32> {
    let cap = i32(pu(4u));
    let p = Pos[t];
    if pu(8u) != 1u {
        return vec2<u32>(0u, u32(clamp(p + 1, 0, cap)));
    }
    var mx = p;
    for (var i = 0u; i < pu(0u); i++) {
        mx = max(mx, Pos[i]);
    }
    let w = i32(pu(9u));
    if w == 0 {
        return vec2<u32>(0u, u32(clamp(mx + 1, 0, cap)));
    }
    let lo = clamp(p - w, 0, cap);
    let hi = clamp(min(p + w, mx) + 1, lo, cap);
    return vec2<u32>(u32(lo), u32(hi));
}

// The sizes every attention entry reads from the params.
struct Dims {
    nh: u32,
    nkv: u32,
    hd: u32,
    splits: u32,
    scale: f32,
}

fn dims() -> Dims {
    return Dims(pu(1u), pu(2u), pu(3u), pu(5u), pf(6u));
}

@compute @workgroup_size(WG)
fn write_kv(@builtin(global_invocation_id) gid: vec3<u32>) {
    let row = pu(2u) * pu(3u);
    let i = gid.x + gid.y * pu(7u);
    if i >= pu(0u) * row {
        return;
    }
    let t = i / row;
    let p = Pos[t];
    if p < 0 || u32(p) >= pu(4u) {
        return;
    }
    let at = u32(p) * row + (i - t * row);
    KC[at] = K[i];
    VC[at] = V[i];
}

@compute @workgroup_size(WG)
fn attn(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let dm = dims();
    let split = wid.x;
    let h = wid.y;
    let t = wid.z;
    let row = dm.nkv * dm.hd;
    let koff = (h / (dm.nh / dm.nkv)) * dm.hd;
    let vis = visible(t);
    let n = vis.y - vis.x;
    let chunk = (n + dm.splits - 1u) / dm.splits;
    let j0 = vis.x + min(n, split * chunk);
    let j1 = min(vis.y, j0 + chunk);
    let qo = (t * dm.nh + h) * dm.hd;
    for (var d = tid; d < dm.hd; d += WG) {
        qsh[d] = Q[qo + d];
    }
    workgroupBarrier();
    var m = NEG;
    var l = 0.0;
    var o: array<f32, HD_PT>;
    for (var base = j0; base < j1; base += WG) {
        let cnt = min(WG, j1 - base);
        let ok = tid < cnt && sees(t, base + tid);
        // Thread tid scores key base + tid. The tile's rows are staged KS dims at a time with
        // coalesced loads (a thread walking its own row issued 32 rows a warp load, serially,
        // from L2); the sum runs over d = 0 .. hd in order as before.
        var acc = 0.0;
        for (var d0 = 0u; d0 < dm.hd; d0 += KS) {
            let dn = min(KS, dm.hd - d0);
            workgroupBarrier();
            for (var e = tid; e < WG * KS; e += WG) {
                let kk = e / KS;
                let dd = e % KS;
                var v = 0.0;
                if kk < cnt && dd < dn {
                    v = KC[(base + kk) * row + koff + d0 + dd];
                }
                ksl[kk * (KS + 1u) + dd] = v;
            }
            workgroupBarrier();
            if ok {
                for (var dd = 0u; dd < dn; dd++) {
                    acc += qsh[d0 + dd] * ksl[tid * (KS + 1u) + dd];
                }
            }
        }
        var s = NEG;
        if ok {
            s = acc * dm.scale;
        }
        sc[tid] = s;
        workgroupBarrier();
        var mx = NEG;
        for (var i = 0u; i < cnt; i++) {
            mx = max(mx, sc[i]);
        }
        let m_new = max(m, mx);
        let alpha = exp(m - m_new);
        workgroupBarrier();
        sc[tid] = select(0.0, exp(s - m_new), ok);
        workgroupBarrier();
        var ls = 0.0;
        for (var i = 0u; i < cnt; i++) {
            ls += sc[i];
        }
        l = l * alpha + ls;
        for (var q = 0u; q < HD_PT; q++) {
            let d = tid + q * WG;
            if d < dm.hd {
                var acc = 0.0;
                for (var i = 0u; i < cnt; i++) {
                    acc += sc[i] * VC[(base + i) * row + koff + d];
                }
                o[q] = o[q] * alpha + acc;
            }
        }
        m = m_new;
        workgroupBarrier();
    }
//#if FINAL
    for (var q = 0u; q < HD_PT; q++) {
        let d = tid + q * WG;
        if d < dm.hd {
            put(qo + d, d, select(0.0, o[q] / l, l > 0.0));
        }
    }
//#if Q8
    q8_row(qo, dm.hd, tid);
//#endif
//#else
    let po = ((t * dm.nh + h) * dm.splits + split) * (dm.hd + 2u);
    for (var q = 0u; q < HD_PT; q++) {
        let d = tid + q * WG;
        if d < dm.hd {
            Part[po + d] = o[q];
        }
    }
    if tid == 0u {
        Part[po + dm.hd] = m;
        Part[po + dm.hd + 1u] = l;
    }
//#endif
}

// Split weights exp(m_s − max) of combine: at most 32 splits (lower.rs clamps them).
var<workgroup> cw: array<f32, 32>;

@compute @workgroup_size(WG)
fn combine(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let nh = pu(1u);
    let hd = pu(3u);
    let splits = pu(5u);
    let h = wid.x;
    let t = wid.y;
    let pb = (t * nh + h) * splits;
    var mx = NEG;
    for (var s = 0u; s < splits; s++) {
        mx = max(mx, Part[(pb + s) * (hd + 2u) + hd]);
    }
    // Each split's weight once (not once per output value, behind serial loads).
    for (var s = tid; s < splits; s += WG) {
        cw[s] = exp(Part[(pb + s) * (hd + 2u) + hd] - mx);
    }
    workgroupBarrier();
    var l = 0.0;
    for (var s = 0u; s < splits; s++) {
        l += Part[(pb + s) * (hd + 2u) + hd + 1u] * cw[s];
    }
    for (var d = tid; d < hd; d += WG) {
        var acc = 0.0;
        for (var s = 0u; s < splits; s++) {
            acc += Part[(pb + s) * (hd + 2u) + d] * cw[s];
        }
        put((t * nh + h) * hd + d, d, select(0.0, acc / l, l > 0.0));
    }
//#if Q8
    q8_row((t * nh + h) * hd, hd, tid);
//#endif
}

// attn_nc: attention of a block of queries that share kv heads: the drafters' non-causal
// blocks of B rows over their context (mode 1), and the causal or tree queries of decode and
// verify steps (modes 0, 2; lower.rs picks it; int8 output only through combine). `attn`
// gives every (query, head) its own workgroup, whose threads each walk one key row's hd values: 32 rows a warp load, re-read by all
// T · nh / nkv queries of a kv head (on an H100, 27B DFlash2 drafter: ~650 µs a layer at 1024
// context rows). Here a workgroup owns one kv head, NC_Q of the T·G query vectors sharing it
// (qi = t·G + g, head kvh·G + g; G = nh / nkv) and one split of the keys, and stages NC_KT key
// rows at a time in workgroup memory with coalesced loads, once for all of them.
// Scores: thread (i, k) = (tid / NC_KT, tid % NC_KT) dots query i with key k, d = 0 .. hd in
// order, 4 at a time (rows as padded vec4s, see NC_HP). Softmax: online per
// query, kept by threads tid < NC_Q. Values: thread (r, d) = (tid / HD_MAX, tid % HD_MAX)
// accumulates dim d of queries r·NC_QPT .. (r + 1)·NC_QPT − 1 over the tile's weights.
// Keys: split s takes its share of the union of the queries' ranges (modes 0 and 2: of a grid
// fixed by the cache size); each query masks the keys outside its own (visible, sees). Output
// as attn: normalised (FINAL), else partials.
// NC_Q, NC_KT (query vectors, key rows a tile; NC_Q · NC_KT = NC_WG) come from the key.
const NC_WG: u32 = 256u;
// Rows as vec4s (the scores' loads are 16 bytes: a quarter of the workgroup-memory loads of
// floats), zero-padded to whole vec4s, and an odd vec4 count a row so the 8 lanes of a 16-byte
// load phase hit distinct banks.
const NC_H4: u32 = (HD_MAX + 3u) / 4u;
const NC_HP: u32 = NC_H4 | 1u;
const NC_R: u32 = NC_WG / HD_MAX;
const NC_QPT: u32 = (NC_Q + NC_R - 1u) / NC_R;

var<workgroup> nc_q: array<vec4<f32>, NC_Q * NC_HP>;
var<workgroup> nc_k: array<vec4<f32>, NC_KT * NC_HP>;
var<workgroup> nc_p: array<f32, NC_Q * NC_KT>;
var<workgroup> nc_c: array<f32, NC_Q>;
var<workgroup> nc_ml: array<vec2<f32>, NC_Q>;

@compute @workgroup_size(NC_WG)
fn attn_nc(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let dm = dims();
    let split = wid.x;
    let kvh = wid.y;
    let g = dm.nh / dm.nkv;
    let nq = pu(0u) * g;
    let q0 = wid.z * NC_Q;
    // This workgroup's query vectors (the grid has ⌈nq / NC_Q⌉ groups).
    let nv = min(NC_Q, nq - q0);
    let row = dm.nkv * dm.hd;
    let koff = kvh * dm.hd;
    // The union of the queries' ranges and this split's part of it.
    var lo = pu(4u);
    var hi = 0u;
    for (var t = 0u; t < pu(0u); t++) {
        let v = visible(t);
        if v.y > v.x {
            lo = min(lo, v.x);
            hi = max(hi, v.y);
        }
    }
    let n = select(0u, hi - lo, hi > lo);
    var chunk = (n + dm.splits - 1u) / dm.splits;
    var j0 = lo + min(n, split * chunk);
    var j1 = min(lo + n, j0 + chunk);
    if pu(8u) != 1u {
        // Causal and tree queries: splits on a grid fixed by the cache size, so a query's
        // tiles, partials and combine do not depend on the other tokens of its run (a verify
        // row equals the decode step's bits, as with `attn`).
        chunk = (pu(4u) + dm.splits - 1u) / dm.splits;
        j0 = split * chunk;
        j1 = max(j0, min(hi, j0 + chunk));
    }
    // The scoring query's own range.
    let si = tid / NC_KT;
    let sk = tid % NC_KT;
    var svis = vec2<u32>(0u, 0u);
    if q0 + si < nq {
        svis = visible((q0 + si) / g);
    }
    for (var e = tid; e < NC_Q * NC_H4 * 4u; e += NC_WG) {
        let i = e / (NC_H4 * 4u);
        let d = e % (NC_H4 * 4u);
        let qi = q0 + i;
        var v = 0.0;
        if qi < nq && d < dm.hd {
            v = Q[((qi / g) * dm.nh + kvh * g + qi % g) * dm.hd + d];
        }
        nc_q[i * NC_HP + d / 4u][d % 4u] = v;
    }
    if tid < NC_Q {
        nc_ml[tid] = vec2<f32>(NEG, 0.0);
    }
    let vr = tid / HD_MAX;
    let vd = tid % HD_MAX;
    var acc: array<f32, NC_QPT>;
    for (var jt = j0; jt < j1; jt += NC_KT) {
        let kn = min(NC_KT, j1 - jt);
        workgroupBarrier();
        for (var e = tid; e < NC_KT * NC_H4 * 4u; e += NC_WG) {
            let kk = e / (NC_H4 * 4u);
            let d = e % (NC_H4 * 4u);
            var v = 0.0;
            if kk < kn && d < dm.hd {
                v = KC[(jt + kk) * row + koff + d];
            }
            nc_k[kk * NC_HP + d / 4u][d % 4u] = v;
        }
        workgroupBarrier();
        let j = jt + sk;
        var s = NEG;
        if sk < kn && j >= svis.x && j < svis.y && sees((q0 + si) / g, j) {
            var qk = 0.0;
            for (var d = 0u; d < NC_H4; d++) {
                qk += dot(nc_q[si * NC_HP + d], nc_k[sk * NC_HP + d]);
            }
            s = qk * dm.scale;
        }
        nc_p[tid] = s;
        workgroupBarrier();
        if tid < NC_Q {
            let ml = nc_ml[tid];
            var mx = NEG;
            for (var k = 0u; k < kn; k++) {
                mx = max(mx, nc_p[tid * NC_KT + k]);
            }
            let m_new = max(ml.x, mx);
            let c = exp(ml.x - m_new);
            var ls = 0.0;
            for (var k = 0u; k < kn; k++) {
                let sv = nc_p[tid * NC_KT + k];
                let w = select(0.0, exp(sv - m_new), sv > NEG);
                nc_p[tid * NC_KT + k] = w;
                ls += w;
            }
            nc_c[tid] = c;
            nc_ml[tid] = vec2<f32>(m_new, ml.y * c + ls);
        }
        workgroupBarrier();
        if vr < NC_R && vd < dm.hd {
            // Each value read once for the thread's NC_QPT queries (the same adds per query,
            // in the same order, as a loop over keys per query); queries past the run's
            // (a decode step has only G) skipped by a uniform test, not a shorter loop, so
            // acc stays in registers.
            for (var q = 0u; q < NC_QPT; q++) {
                if vr * NC_QPT + q < nv {
                    acc[q] *= nc_c[vr * NC_QPT + q];
                }
            }
            for (var k = 0u; k < kn; k++) {
                let v = VC[(jt + k) * row + koff + vd];
                for (var q = 0u; q < NC_QPT; q++) {
                    if vr * NC_QPT + q < nv {
                        acc[q] += nc_p[(vr * NC_QPT + q) * NC_KT + k] * v;
                    }
                }
            }
        }
    }
    workgroupBarrier();
    if vr < NC_R && vd < dm.hd {
        for (var q = 0u; q < NC_QPT; q++) {
            let i = vr * NC_QPT + q;
            let qi = q0 + i;
            if i < NC_Q && qi < nq {
                let t = qi / g;
                let h = kvh * g + qi % g;
                let ml = nc_ml[i];
//#if FINAL
                Out[(t * dm.nh + h) * dm.hd + vd] = select(0.0, acc[q] / ml.y, ml.y > 0.0);
//#else
                let po = ((t * dm.nh + h) * dm.splits + split) * (dm.hd + 2u);
                Part[po + vd] = acc[q];
                if vd == 0u {
                    Part[po + dm.hd] = ml.x;
                    Part[po + dm.hd + 1u] = ml.y;
                }
//#endif
            }
        }
    }
}
