// y[n, col_off + m] = Σ_k x[n, k] · w[m, k] for a few input rows (decode and verify widths).
// One workgroup per weight row: the workgroup streams the row once, 4 elements per thread and
// step, and accumulates every input row against it; partial sums are reduced with subgroupAdd
// (SG) or through workgroup memory.
// Constants: WG (threads), NB (input rows the registers hold, ≥ N), SG (subgroup reduction).
// Params: 0 N, 1 K, 2 M (rows of this weight part), 3 row bytes, 4 ldy, 5 col_off, 6 grid x.

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> W: array<u32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;

//#dequant W

var<workgroup> red: array<f32, NB * WG>;

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
    let n_rows = pu(0u);
    let k = pu(1u);
    let row = wid.x + wid.y * pu(6u);
    var acc: array<f32, NB>;
    if row < pu(2u) {
        let ro = row * pu(3u);
        for (var e = tid * 4u; e < k; e += WG * 4u) {
            var w = W_dq4(ro, e);
            if e + 4u <= k {
                for (var n = 0u; n < NB; n++) {
                    if n < n_rows {
                        let o = n * k + e;
                        acc[n] += dot(w, vec4<f32>(X[o], X[o + 1u], X[o + 2u], X[o + 3u]));
                    }
                }
            } else {
                // Ragged end of a plain-float row: mask both sides (the next row may be NaN).
                for (var n = 0u; n < NB; n++) {
                    if n < n_rows {
                        var s = 0.0;
                        for (var i = 0u; e + i < k; i++) {
                            s += w[i] * X[n * k + e + i];
                        }
                        acc[n] += s;
                    }
                }
            }
        }
    }
//#if SG
    for (var n = 0u; n < NB; n++) {
        let s = subgroupAdd(acc[n]);
        if sg_lane == 0u {
            red[n * WG + sg_id] = s;
        }
    }
    workgroupBarrier();
    let parts = n_sg;
//#else
    for (var n = 0u; n < NB; n++) {
        red[n * WG + tid] = acc[n];
    }
    workgroupBarrier();
    let parts = WG;
//#endif
    if row < pu(2u) {
        for (var n = tid; n < n_rows; n += WG) {
            var s = 0.0;
            for (var i = 0u; i < parts; i++) {
                s += red[n * WG + i];
            }
            Y[n * pu(4u) + pu(5u) + row] = s;
        }
    }
}
