// y[n, col_off + m] = Σ_k x[n, k] · w[m, k] for prompt-wide inputs on cooperative matrices
// (tensor cores / WMMA through VK_KHR_cooperative_matrix): 64 × 64 output tiles, K in steps of
// 32 through workgroup memory. Each step dequantizes the 64 × 32 weight tile and converts the
// 64 × 32 input tile to f16 once; four subgroups of 32 lanes then multiply 16 × 16 × 16 f16
// tiles into f32 accumulators. Subgroup s owns weight rows m0 + 16 s .. + 16 against all 64
// input rows: one B (weight) load and four A (input) loads feed four multiply-adds per 16 k.
// f16 keeps 11 bits of each input (the int8 path keeps 8); activations beyond ±65504 would
// overflow, as in llama.cpp's Vulkan f16 matrix-core path.
// Needs subgroups of exactly 32 lanes (the lowering checks the adapter).
// Params: 0 N, 1 K, 2 M (rows of this weight part), 3 row bytes, 4 ldy, 5 col_off.

enable f16;
enable wgpu_cooperative_matrix;

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> W: array<u32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;

//#dequant W

const TS: u32 = 64u;
const TK: u32 = 32u;
// Row pitch of the f16 tiles: 32 + 8 halves keeps every 16 × 16 load 16-byte aligned and
// staggers rows across banks.
const LDT: u32 = 40u;

var<workgroup> ws: array<f16, 2560>; // TS * LDT, [m][k]
var<workgroup> xs: array<f16, 2560>; // TS * LDT, [n][k]
// One 16 × 16 f32 staging tile per subgroup for the bounds-checked write-out.
var<workgroup> cs: array<f32, 1024>;

fn stage_out(c: coop_mat16x16<f32, C>, sg: u32, lane: u32, n0: u32, m0: u32) {
    coopStoreT(c, &cs[sg * 256u], 16u);
    workgroupBarrier();
    let n_rows = pu(0u);
    let m_rows = pu(2u);
    for (var i = 0u; i < 8u; i++) {
        let e = lane + i * 32u;
        let n = n0 + (e >> 4u);
        let m = m0 + (e & 15u);
        if n < n_rows && m < m_rows {
            Y[n * pu(4u) + pu(5u) + m] = cs[sg * 256u + e];
        }
    }
    workgroupBarrier();
}

@compute @workgroup_size(128)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_id) sg: u32,
) {
    let n_rows = pu(0u);
    let k = pu(1u);
    let m_rows = pu(2u);
    let rb = pu(3u);
    let m0 = wid.x * TS;
    let n0 = wid.y * TS;
    var c0 = coop_mat16x16<f32, C>();
    var c1 = coop_mat16x16<f32, C>();
    var c2 = coop_mat16x16<f32, C>();
    var c3 = coop_mat16x16<f32, C>();
    for (var k0 = 0u; k0 < k; k0 += TK) {
        // 64 rows × 32 k of each operand: four groups of 4 values per thread.
        for (var i = 0u; i < 4u; i++) {
            let idx = tid + i * 128u;
            let r = idx >> 3u;
            let c = (idx & 7u) * 4u;
            var w = vec4<f32>(0.0);
            if m0 + r < m_rows && k0 + c < k {
                w = W_dq4((m0 + r) * rb, k0 + c);
            }
            var x = vec4<f32>(0.0);
            if n0 + r < n_rows {
                let xo = (n0 + r) * k + k0 + c;
                for (var j = 0u; j < 4u; j++) {
                    if k0 + c + j < k {
                        x[j] = X[xo + j];
                    }
                }
            }
            for (var j = 0u; j < 4u; j++) {
                if k0 + c + j >= k {
                    w[j] = 0.0;
                }
                ws[r * LDT + c + j] = f16(w[j]);
                xs[r * LDT + c + j] = f16(x[j]);
            }
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk += 16u) {
            // B[k][m] = w[m][k]: column-major in ws.
            let b = coopLoad<coop_mat16x16<f16, B>>(&ws[sg * 16u * LDT + kk], LDT);
            // A[n][k] = x[n][k]: row-major in xs.
            c0 = coopMultiplyAdd(coopLoadT<coop_mat16x16<f16, A>>(&xs[kk], LDT), b, c0);
            c1 = coopMultiplyAdd(coopLoadT<coop_mat16x16<f16, A>>(&xs[16u * LDT + kk], LDT), b, c1);
            c2 = coopMultiplyAdd(coopLoadT<coop_mat16x16<f16, A>>(&xs[32u * LDT + kk], LDT), b, c2);
            c3 = coopMultiplyAdd(coopLoadT<coop_mat16x16<f16, A>>(&xs[48u * LDT + kk], LDT), b, c3);
        }
        workgroupBarrier();
    }
    let ms = m0 + sg * 16u;
    stage_out(c0, sg, lane, n0, ms);
    stage_out(c1, sg, lane, n0 + 16u, ms);
    stage_out(c2, sg, lane, n0 + 32u, ms);
    stage_out(c3, sg, lane, n0 + 48u, ms);
}
