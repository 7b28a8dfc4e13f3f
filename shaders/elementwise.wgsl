// Elementwise binary ops on f32: OP 0 add, 1 x·sigmoid(g), 2 silu(gate)·up.
// Params: 0 n, 1 threads per grid row.

@group(0) @binding(1) var<storage, read> A: array<f32>;
@group(0) @binding(2) var<storage, read> B: array<f32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;

const WG: u32 = 256u;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x + gid.y * pu(1u);
    if i >= pu(0u) {
        return;
    }
    let a = A[i];
    let b = B[i];
//#if OP_ADD
    Y[i] = a + b;
//#endif
//#if OP_SIGMOID_MUL
    Y[i] = a * (1.0 / (1.0 + exp(-b)));
//#endif
//#if OP_SWIGLU
    Y[i] = (a / (1.0 + exp(-a))) * b;
//#endif
}
