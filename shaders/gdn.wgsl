// Gated delta net, recurrent form, token by token. Workgroup (h, block) owns value head h and
// WG of its state columns; each thread keeps one column S[:, j] (DK values) in registers for
// all T tokens. Per token: q, k of the key head are staged in workgroup memory and
// L2-normalised, then S = e^g·S; kv = Sᵀk; δ = β·(v − kv); S += k ⊗ δ; o = Sᵀq.
// TREE (graph op GatedDeltaNetTree): row t starts from its parent's state (kept in registers
// when the parent is row t − 1, else reloaded from Tok[parent] or, for parent < 0, from S) and
// its updated columns go to Tok[t]; S is only read. A thread reads back only the columns it
// wrote itself, so rows need no barrier for them.
// Constants: WG, DK (≥ dk). Params: 0 T, 1 nk, 2 nv, 3 dk, 4 dv, 5 head map (0 tiled,
// 1 grouped), 6 l2 eps (f32), 7 q scale (f32).

@group(0) @binding(1) var<storage, read> QKV: array<f32>;
@group(0) @binding(2) var<storage, read> B: array<f32>;
@group(0) @binding(3) var<storage, read> A: array<f32>;
@group(0) @binding(4) var<storage, read> SA: array<u32>;
@group(0) @binding(5) var<storage, read> DT: array<u32>;
//#if TREE
@group(0) @binding(6) var<storage, read> Par: array<i32>;
@group(0) @binding(7) var<storage, read_write> S: array<f32>;
@group(0) @binding(8) var<storage, read_write> Tok: array<f32>;
@group(0) @binding(9) var<storage, read_write> O: array<f32>;
//#else
@group(0) @binding(6) var<storage, read_write> S: array<f32>;
@group(0) @binding(7) var<storage, read_write> O: array<f32>;
//#endif

//#dequant SA
//#dequant DT

var<workgroup> qs: array<f32, DK>;
var<workgroup> ks: array<f32, DK>;

fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        return x;
    }
    if x < -15.0 {
        // log1p(e^x) = e^x (1 − e^x/2 + …): keeps tiny values that log(1 + e^x) rounds away.
        let e = exp(x);
        return e * (1.0 - 0.5 * e);
    }
    return log(1.0 + exp(x));
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let t_n = pu(0u);
    let nk = pu(1u);
    let nv = pu(2u);
    let dk = pu(3u);
    let dv = pu(4u);
    let h = wid.x;
    let j = wid.y * WG + tid;
    let live = j < dv;
    var kh = h % nk;
    if pu(5u) == 1u {
        kh = h / (nv / nk);
    }
    let key_dim = nk * dk;
    let conv_dim = 2u * key_dim + nv * dv;
    let eps = pf(6u);
    let q_scale = pf(7u);
    let sa = SA_dq1(h);
    let dt = DT_dq1(h);
    let sbase = h * dk * dv + j;

    var s: array<f32, DK>;
    if live {
        for (var i = 0u; i < dk; i++) {
            s[i] = S[sbase + i * dv];
        }
    }
    let hs = nv * dk * dv;
    for (var t = 0u; t < t_n; t++) {
//#if TREE
        let par = Par[t];
        if live && par != i32(t) - 1 {
            for (var i = 0u; i < dk; i++) {
                if par < 0 {
                    s[i] = S[sbase + i * dv];
                } else {
                    s[i] = Tok[u32(par) * hs + sbase + i * dv];
                }
            }
        }
//#endif
        let row = t * conv_dim;
        for (var i = tid; i < dk; i += WG) {
            qs[i] = QKV[row + kh * dk + i];
            ks[i] = QKV[row + key_dim + kh * dk + i];
        }
        workgroupBarrier();
        var qq = 0.0;
        var kk = 0.0;
        for (var i = 0u; i < dk; i++) {
            qq += qs[i] * qs[i];
            kk += ks[i] * ks[i];
        }
        let rq = 1.0 / sqrt(qq + eps);
        let rk = 1.0 / sqrt(kk + eps);
        if live {
            let beta = 1.0 / (1.0 + exp(-B[t * nv + h]));
            let decay = exp(sa * softplus(A[t * nv + h] + dt));
            var kv = 0.0;
            for (var i = 0u; i < dk; i++) {
                s[i] *= decay;
                kv += s[i] * (ks[i] * rk);
            }
            let delta = (QKV[row + 2u * key_dim + h * dv + j] - kv) * beta;
            var o = 0.0;
            for (var i = 0u; i < dk; i++) {
                s[i] += (ks[i] * rk) * delta;
                o += s[i] * ((qs[i] * rq) * q_scale);
            }
            O[(t * nv + h) * dv + j] = o;
//#if TREE
            for (var i = 0u; i < dk; i++) {
                Tok[t * hs + sbase + i * dv] = s[i];
            }
//#endif
        }
        workgroupBarrier();
    }
//#if !TREE
    if live {
        for (var i = 0u; i < dk; i++) {
            S[sbase + i * dv] = s[i];
        }
    }
//#endif
}
