// The attention layer's preparation of the new rows in one dispatch: per-head RMS norm of the
// raw queries and keys (q_norm, k_norm), partial NeoX RoPE of both, the query write and the
// cache writes of the new keys and values (what norm.wgsl ×2, rope.wgsl ×2 and attention.wgsl's
// write_kv do as five dispatches). The arithmetic is theirs: r = 1/sqrt(Σx²/D + eps),
// y = (x · r) · w, then rope.wgsl's rotation of y (Cody–Waite reduced cos/sin times the
// attention factor). Only the order of the Σx² additions differs from norm.wgsl.
// Workgroup (j, t): j < nh is query head j of token t (written to Q); nh ≤ j < nh + nkv is key
// head j − nh (written to the key cache at row KPos[t]), which also copies value head j − nh to
// the value cache. Rows outside the cache are not written (as write_kv).
// Each thread owns elements tid, tid + WG, … (at most NE); the normed head is exchanged
// through workgroup memory because the rotation pairs element i with i ± rot/2.
// Constants: NE (elements per thread), HD_MAX (≥ hd). Params: 0 T, 1 nh, 2 nkv, 3 hd, 4 cap,
// 5 rot, 6 eps (f32), 7 attention factor (f32).

@group(0) @binding(#) var<storage, read> QX: array<f32>;
@group(0) @binding(#) var<storage, read> KX: array<f32>;
@group(0) @binding(#) var<storage, read> V: array<f32>;
@group(0) @binding(#) var<storage, read> QW: array<u32>;
@group(0) @binding(#) var<storage, read> KW: array<u32>;
@group(0) @binding(#) var<storage, read> Pos: array<i32>;
@group(0) @binding(#) var<storage, read> KPos: array<i32>;
@group(0) @binding(#) var<storage, read> F: array<f32>;
@group(0) @binding(#) var<storage, read_write> Q: array<f32>;
@group(0) @binding(#) var<storage, read_write> KC: array<f32>;
@group(0) @binding(#) var<storage, read_write> VC: array<f32>;

//#dequant QW
//#dequant KW

const WG: u32 = 64u;

var<workgroup> ys: array<f32, HD_MAX>;
var<workgroup> red: array<f32, WG>;

// As rope.wgsl.
fn cos_sin(a: f32) -> vec2<f32> {
    let k = round(a * 0.15915494309189535);
    let r = ((a - k * 6.28125) - k * 0.0019353071693331003) - k * 1.0253131677018246e-11;
    return vec2<f32>(cos(r), sin(r));
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let nh = pu(1u);
    let nkv = pu(2u);
    let hd = pu(3u);
    let j = wid.x;
    let t = wid.y;
    let is_q = j < nh;
    var h = j;
    var heads = nh;
    if !is_q {
        h = j - nh;
        heads = nkv;
    }
    let base = (t * heads + h) * hd;
    var x: array<f32, NE>;
    var ss = 0.0;
    for (var e = 0u; e < NE; e++) {
        let i = tid + e * WG;
        var v = 0.0;
        if i < hd {
            if is_q {
                v = QX[base + i];
            } else {
                v = KX[base + i];
            }
        }
        x[e] = v;
        ss += v * v;
    }
    red[tid] = ss;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if tid < s {
            red[tid] += red[tid + s];
        }
        workgroupBarrier();
    }
    let r = 1.0 / sqrt(red[0] / f32(hd) + pf(6u));
    for (var e = 0u; e < NE; e++) {
        let i = tid + e * WG;
        if i < hd {
            var w = 0.0;
            if is_q {
                w = QW_dq1(i);
            } else {
                w = KW_dq1(i);
            }
            ys[i] = (x[e] * r) * w;
        }
    }
    workgroupBarrier();
    let p = f32(Pos[t]);
    let half = pu(5u) / 2u;
    let m = pf(7u);
    // Key rows go to the cache row KPos[t] (skipped outside the cache).
    let kp = KPos[t];
    let row = nkv * hd;
    let k_ok = kp >= 0 && u32(kp) < pu(4u);
    let at = u32(max(kp, 0)) * row + h * hd;
    for (var e = 0u; e < NE; e++) {
        let i = tid + e * WG;
        if i >= hd {
            continue;
        }
        var y = ys[i];
        if i < half {
            let cs = cos_sin(p * F[i]) * m;
            y = ys[i] * cs.x - ys[i + half] * cs.y;
        } else if i < 2u * half {
            let cs = cos_sin(p * F[i - half]) * m;
            y = ys[i] * cs.x + ys[i - half] * cs.y;
        }
        if is_q {
            Q[base + i] = y;
        } else if k_ok {
            KC[at + i] = y;
            VC[at + i] = V[base + i];
        }
    }
}
