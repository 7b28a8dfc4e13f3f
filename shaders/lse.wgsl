// LogSumExp of each row (workgroup (0, row)): the row's maximum m, then m + log(Σ exp(x − m))
// (the log-softmax normaliser of a logits row).
// Params: 0 rows, 1 W (values per row).

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> Out: array<f32>;

const WG: u32 = 64u;

var<workgroup> red: array<f32, WG>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let w = pu(1u);
    let row = wid.y;
    var m = bitcast<f32>(0xff800000u);
    for (var e = tid; e < w; e += WG) {
        m = max(m, X[row * w + e]);
    }
    red[tid] = m;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if tid < s {
            red[tid] = max(red[tid], red[tid + s]);
        }
        workgroupBarrier();
    }
    m = red[0];
    workgroupBarrier();
    var acc = 0.0;
    for (var e = tid; e < w; e += WG) {
        acc += exp(X[row * w + e] - m);
    }
    red[tid] = acc;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if tid < s {
            red[tid] = red[tid] + red[tid + s];
        }
        workgroupBarrier();
    }
    if tid == 0u {
        Out[row] = m + log(red[0]);
    }
}
