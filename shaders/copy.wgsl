// Copies. Default: strided copy y[o + r·len + j] = x[r · width + offset + j] for j < len
// (slice_last; rows is one row of `len` = rows · width values; concat writes each input at its
// rows through the output offset o).
// Params: 0 total (= rows · len), 1 width, 2 offset, 3 len, 4 threads per grid row, 5 o.
// BULK: y = x over n vec4s (the bandwidth probe): every thread moves UNROLL vec4s per round,
// all loads issued before the stores, rounds striding over the whole grid.
// Params: 0 n (vec4s), 1 threads in the grid.

//#if BULK
@group(0) @binding(1) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> Y: array<vec4<f32>>;
//#else
@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
//#endif

const WG: u32 = 256u;
const UNROLL: u32 = 4u;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
//#if BULK
    let n = pu(0u);
    let stride = pu(1u);
    for (var i = gid.x; i < n; i += stride * UNROLL) {
        var v: array<vec4<f32>, UNROLL>;
        for (var j = 0u; j < UNROLL; j++) {
            let e = i + j * stride;
            if e < n {
                v[j] = X[e];
            }
        }
        for (var j = 0u; j < UNROLL; j++) {
            let e = i + j * stride;
            if e < n {
                Y[e] = v[j];
            }
        }
    }
//#else
    let i = gid.x + gid.y * pu(4u);
    if i >= pu(0u) {
        return;
    }
    let len = pu(3u);
    let r = i / len;
    Y[pu(5u) + i] = X[r * pu(1u) + pu(2u) + (i - r * len)];
//#endif
}
