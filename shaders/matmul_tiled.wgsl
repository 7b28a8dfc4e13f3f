// y[n, col_off + m] = Σ_k x[n, k] · w[m, k] for more input rows than the GEMV holds (verify
// widths and prefill): 64 × TN output tiles (TN = 16, 32 or 64), 256 threads of 4 × TN/16
// outputs, K in steps of 32 through workgroup memory. Each weight tile is dequantized once per
// workgroup and used for all TN input rows, so for N ≤ TN every weight element is decoded
// exactly once.
// Constants: TN. Params: 0 N, 1 K, 2 M (rows of this weight part), 3 row bytes, 4 ldy, 5 col_off.

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> W: array<u32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;

//#dequant W

const TS: u32 = 64u;
const TK: u32 = 32u;
const LD: u32 = 33u;
// Input rows per thread.
const NPT: u32 = TN / 16u;

var<workgroup> ws: array<f32, 2112>; // TS * LD
var<workgroup> xs: array<f32, TN * LD>;

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let n_rows = pu(0u);
    let k = pu(1u);
    let m_rows = pu(2u);
    let rb = pu(3u);
    let tid = lid.y * 16u + lid.x;
    let m0 = wid.x * TS;
    let n0 = wid.y * TN;
    var acc: array<vec4<f32>, NPT>;
    for (var k0 = 0u; k0 < k; k0 += TK) {
        for (var i = 0u; i < 2u; i++) {
            let idx = tid + i * 256u;
            let r = idx >> 3u;
            let c = (idx & 7u) * 4u;
            var w = vec4<f32>(0.0);
            if m0 + r < m_rows && k0 + c < k {
                w = W_dq4((m0 + r) * rb, k0 + c);
                for (var j = 0u; j < 4u; j++) {
                    if k0 + c + j >= k {
                        w[j] = 0.0;
                    }
                }
            }
            ws[r * LD + c] = w.x;
            ws[r * LD + c + 1u] = w.y;
            ws[r * LD + c + 2u] = w.z;
            ws[r * LD + c + 3u] = w.w;
        }
        for (var i = 0u; i < TN / 8u; i++) {
            let idx = tid + i * 256u;
            let r = idx >> 5u;
            let c = idx & 31u;
            var v = 0.0;
            if n0 + r < n_rows && k0 + c < k {
                v = X[(n0 + r) * k + k0 + c];
            }
            xs[r * LD + c] = v;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk++) {
            let b = vec4<f32>(ws[(lid.x * 4u) * LD + kk], ws[(lid.x * 4u + 1u) * LD + kk], ws[(lid.x * 4u + 2u) * LD + kk], ws[(lid.x * 4u + 3u) * LD + kk]);
            for (var i = 0u; i < NPT; i++) {
                acc[i] += xs[(lid.y * NPT + i) * LD + kk] * b;
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < NPT; i++) {
        let n = n0 + lid.y * NPT + i;
        if n < n_rows {
            for (var j = 0u; j < 4u; j++) {
                let m = m0 + lid.x * 4u + j;
                if m < m_rows {
                    Y[n * pu(4u) + pu(5u) + m] = acc[i][j];
                }
            }
        }
    }
}
