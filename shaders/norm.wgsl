// Normalisations over rows of D values, one workgroup per row.
// RMS: y = (x · r) · w, r = 1/sqrt(mean(x²) + eps); ADD: s = x + res, y = rmsnorm(s) · w;
// GATED: y = ((x · r) · w) · silu(z); L2: y = (x · 1/sqrt(Σx² + eps)) · scale.
// V4 (D % 4 == 0): every buffer is read as vec4, four values per thread and step, so a
// 5120-wide decode row is 5 loads per thread of a 256-thread workgroup. The sum of squares is
// reduced with subgroupAdd (SG) or a workgroup-memory tree.
// Constants: WG (power of two). Params: 0 rows, 1 D, 2 eps (f32), 3 scale (f32), 4 grid x.

//#if V4
alias T = vec4<f32>;
const VW: u32 = 4u;
//#else
alias T = f32;
const VW: u32 = 1u;
//#endif

@group(0) @binding(#) var<storage, read> X: array<T>;
//#if ADD
@group(0) @binding(#) var<storage, read> R: array<T>;
//#endif
//#if GATED
@group(0) @binding(#) var<storage, read> Z: array<T>;
//#endif
//#if !L2
@group(0) @binding(#) var<storage, read> W: array<u32>;
//#endif
//#if ADD
@group(0) @binding(#) var<storage, read_write> S: array<T>;
//#endif
@group(0) @binding(#) var<storage, read_write> Y: array<T>;

//#if !L2
//#dequant W
//#endif

var<workgroup> red: array<f32, WG>;

fn load(i: u32) -> T {
//#if ADD
    return X[i] + R[i];
//#else
    return X[i];
//#endif
}

fn sq(v: T) -> f32 {
//#if V4
    return dot(v, v);
//#else
    return v * v;
//#endif
}

//#if !L2
// Weight values of vector index i.
fn wv(i: u32) -> T {
//#if V4
    return W_dq4(0u, 4u * i);
//#else
    return W_dq1(i);
//#endif
}
//#endif

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
//#if SG
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(num_subgroups) n_sg: u32,
//#endif
) {
    let row = wid.x + wid.y * pu(4u);
    let live = row < pu(0u);
    let d = pu(1u);
    let dv = d / VW;
    let base = row * dv;
    var ss = 0.0;
    if live {
        for (var i = tid; i < dv; i += WG) {
            let v = load(base + i);
//#if ADD
            S[base + i] = v;
//#endif
            ss += sq(v);
        }
    }
//#if SG
    let part = subgroupAdd(ss);
    if sg_lane == 0u {
        red[sg_id] = part;
    }
    workgroupBarrier();
    var total = 0.0;
    for (var i = 0u; i < n_sg; i++) {
        total += red[i];
    }
//#else
    red[tid] = ss;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if tid < s {
            red[tid] += red[tid + s];
        }
        workgroupBarrier();
    }
    let total = red[0];
//#endif
    if !live {
        return;
    }
//#if L2
    let r = 1.0 / sqrt(total + pf(2u));
    for (var i = tid; i < dv; i += WG) {
        Y[base + i] = (X[base + i] * r) * pf(3u);
    }
//#else
    let r = 1.0 / sqrt(total / f32(d) + pf(2u));
    for (var i = tid; i < dv; i += WG) {
//#if GATED
        let z = Z[base + i];
        Y[base + i] = ((X[base + i] * r) * wv(i)) * (z / (1.0 + exp(-z)));
//#else
        Y[base + i] = (load(base + i) * r) * wv(i);
//#endif
    }
//#endif
}
