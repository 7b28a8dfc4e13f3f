// Normalisations over rows of D values, one workgroup per row.
// RMS: y = (x · r) · w, r = 1/sqrt(mean(x²) + eps); ADD: s = x + res, y = rmsnorm(s) · w;
// GATED: y = ((x · r) · w) · silu(z); L2: y = (x · 1/sqrt(Σx² + eps)) · scale.
// Params: 0 rows, 1 D, 2 eps (f32), 3 scale (f32), 4 grid x.

@group(0) @binding(1) var<storage, read> X: array<f32>;
//#if ADD
@group(0) @binding(2) var<storage, read> R: array<f32>;
@group(0) @binding(3) var<storage, read> W: array<u32>;
@group(0) @binding(4) var<storage, read_write> S: array<f32>;
@group(0) @binding(5) var<storage, read_write> Y: array<f32>;
//#endif
//#if GATED
@group(0) @binding(2) var<storage, read> Z: array<f32>;
@group(0) @binding(3) var<storage, read> W: array<u32>;
@group(0) @binding(4) var<storage, read_write> Y: array<f32>;
//#endif
//#if RMS
@group(0) @binding(2) var<storage, read> W: array<u32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;
//#endif
//#if L2
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
//#endif

//#if !L2
//#dequant W
//#endif

const WG: u32 = 128u;
var<workgroup> red: array<f32, WG>;

fn load(i: u32) -> f32 {
//#if ADD
    return X[i] + R[i];
//#else
    return X[i];
//#endif
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let row = wid.x + wid.y * pu(4u);
    let live = row < pu(0u);
    let d = pu(1u);
    let base = row * d;
    var ss = 0.0;
    if live {
        for (var i = tid; i < d; i += WG) {
            let v = load(base + i);
//#if ADD
            S[base + i] = v;
//#endif
            ss += v * v;
        }
    }
    red[tid] = ss;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if tid < s {
            red[tid] += red[tid + s];
        }
        workgroupBarrier();
    }
    let total = red[0];
    if !live {
        return;
    }
//#if L2
    let r = 1.0 / sqrt(total + pf(2u));
    for (var i = tid; i < d; i += WG) {
        Y[base + i] = (X[base + i] * r) * pf(3u);
    }
//#else
    let r = 1.0 / sqrt(total / f32(d) + pf(2u));
    for (var i = tid; i < d; i += WG) {
//#if GATED
        let z = Z[base + i];
        Y[base + i] = ((X[base + i] * r) * W_dq1(i)) * (z / (1.0 + exp(-z)));
//#else
        Y[base + i] = (load(base + i) * r) * W_dq1(i);
//#endif
    }
//#endif
}
