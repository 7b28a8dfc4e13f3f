// Strided copy: y[r, j] = x[r · width + offset + j] for j < len (slice_last; rows is one
// row of `len` = rows · width values).
// Params: 0 total (= rows · len), 1 width, 2 offset, 3 len, 4 threads per grid row.

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;

const WG: u32 = 256u;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x + gid.y * pu(4u);
    if i >= pu(0u) {
        return;
    }
    let len = pu(3u);
    let r = i / len;
    Y[i] = X[r * pu(1u) + pu(2u) + (i - r * len)];
}
