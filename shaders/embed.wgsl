// out[t, :] = table[ids[t], :], dequantized. One workgroup per token; a table split into
// parts by rows runs once per part, each writing the tokens whose id falls in it.
// Params: 0 T, 1 D, 2 row bytes, 3 first row of this part, 4 rows of this part, 5 vocab,
// 6 grid x.

@group(0) @binding(1) var<storage, read> Ids: array<i32>;
@group(0) @binding(2) var<storage, read> W: array<u32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;

//#dequant W

const WG: u32 = 64u;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let t = wid.x + wid.y * pu(6u);
    if t >= pu(0u) {
        return;
    }
    let d = pu(1u);
    let id = Ids[t];
    let first = pu(3u);
    var inside = id >= 0 && u32(id) >= first && u32(id) - first < pu(4u);
    // An id outside the vocabulary (only a graph-computed one can be) reads as zeros.
    let bad = id < 0 || u32(id) >= pu(5u);
    if !inside && !(bad && first == 0u) {
        return;
    }
    let ro = select((u32(id) - first) * pu(2u), 0u, bad);
    for (var e = tid * 4u; e < d; e += WG * 4u) {
        var v = vec4<f32>(0.0);
        if !bad {
            v = W_dq4(ro, e);
        }
        for (var j = 0u; j < 4u && e + j < d; j++) {
            Y[t * d + e + j] = v[j];
        }
    }
}
