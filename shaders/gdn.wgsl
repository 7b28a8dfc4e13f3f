// Gated delta net, recurrent form, token by token (model notes §4.3-4.4; the CPU reference
// src/backend/cpu/kernels/gdn.rs). Per token t and value head h with key head kh:
//   q, k L2-normalised (q then scaled by dk^-0.5), β = sigmoid(b), g = ssm_a·softplus(a + dt_bias)
//   S = e^g·S;  kv = Sᵀk;  δ = β·(v − kv);  S += k ⊗ δ;  o = Sᵀq
// State S [nv, DK, dv] (f32), column j of head h at S[h·DK·dv + i·dv + j].
//
// Workgroup (h, block) owns COLS state columns of head h for all T tokens. Each column is split
// over SPLIT consecutive lanes ("parts"); part p keeps rows i = r·SPLIT + p (r < R = DK/SPLIT)
// in registers, so the state is read once and written once per call, and a warp's load of one
// r touches SPLIT rows × (its columns) contiguous runs. Rows interleave by part so the lanes of
// a column read distinct workgroup-memory banks. Per token the raw q, k of key head kh are
// staged in workgroup memory; every lane sums the squares, k·S and q·S over its rows and the
// SPLIT lanes of a column combine them with xor shuffles (SG: needs subgroups of at least
// SPLIT lanes, which the lowering checks) or through workgroup memory. The butterfly gives every
// lane of a column the same bits (float addition commutes), so all columns use identical norms
// and a token's results do not depend on T or on where it sits in the call.
//
// TREE (graph op GatedDeltaNetTree): row t starts from its parent's state (kept in registers
// when the parent is row t − 1, else reloaded from Tok[parent] or, for parent < 0, from S) and
// its updated state goes to Tok[t]; S is only read. A lane reads back only the entries it wrote
// itself, so rows need no barrier for them.
//
// LOG (graph op GatedDeltaNetLog): S is only read, and row t's inputs [q | k | v | b | a] go to
// Lg[t] (row width conv_dim + 2·nv). The replay of a log (GatedDeltaNetReplay) is the plain step
// with the log bound as QKV, B and A: params 8-11 give the row strides and the offsets of b, a.
//
// Constants: DK (= dk), COLS, SPLIT (power of two dividing DK), R = DK / SPLIT,
// WG = COLS·SPLIT. Params: 0 T, 1 nk, 2 nv, 3 dk, 4 dv, 5 head map (0 tiled, 1 grouped),
// 6 l2 eps (f32), 7 q scale (f32), 8 qkv row stride, 9 b/a row stride, 10 b offset, 11 a offset.

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
//#if LOG
@group(0) @binding(6) var<storage, read> S: array<f32>;
@group(0) @binding(7) var<storage, read_write> Lg: array<f32>;
@group(0) @binding(8) var<storage, read_write> O: array<f32>;
//#else
@group(0) @binding(6) var<storage, read_write> S: array<f32>;
@group(0) @binding(7) var<storage, read_write> O: array<f32>;
//#endif
//#endif

//#dequant SA
//#dequant DT

var<workgroup> qs: array<f32, DK>;
var<workgroup> ks: array<f32, DK>;
//#if !SG
var<workgroup> red: array<vec2<f32>, WG>;
//#endif

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

// The sum of x over the SPLIT lanes of lane's column, the same bits in each of them. Called in
// uniform control flow by every lane (idle columns add zeros).
fn col_sum(x: vec2<f32>, lane: u32) -> vec2<f32> {
    var s = x;
//#if SG
    for (var m = 1u; m < SPLIT; m <<= 1u) {
        s += subgroupShuffleXor(s, m);
    }
//#else
    red[lane] = x;
    workgroupBarrier();
    let first = lane - lane % SPLIT;
    s = red[first];
    for (var p = 1u; p < SPLIT; p++) {
        s += red[first + p];
    }
    // red is rewritten by the next sum.
    workgroupBarrier();
//#endif
    return s;
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
//#if SG
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_size) sg_size: u32,
//#endif
) {
//#if SG
    // Shuffle partners are subgroup lanes: number the lanes by subgroup so that a column's
    // SPLIT parts are lanes of one subgroup whatever the driver's mapping of invocation
    // indices (subgroups of ≥ SPLIT lanes, all full but the last).
    let lane = sg_id * sg_size + sg_lane;
//#else
    let lane = tid;
//#endif
    let t_n = pu(0u);
    let nk = pu(1u);
    let nv = pu(2u);
    let dv = pu(4u);
    let h = wid.x;
    let part = lane % SPLIT;
    let j = wid.y * COLS + lane / SPLIT;
    let live = j < dv;
    var kh = h % nk;
    if pu(5u) == 1u {
        kh = h / (nv / nk);
    }
    let key_dim = nk * DK;
    let qkv_stride = pu(8u);
    let ba_stride = pu(9u);
    let b_off = pu(10u);
    let a_off = pu(11u);
//#if LOG
    let conv_dim = 2u * key_dim + nv * dv;
    let log_row = conv_dim + 2u * nv;
    // q and k of key head kh are logged by one workgroup: its first value head's column block 0.
    var first = kh;
    if pu(5u) == 1u {
        first = kh * (nv / nk);
    }
    let logs_qk = wid.y == 0u && h == first;
//#endif
    let eps = pf(6u);
    let q_scale = pf(7u);
    let sa = SA_dq1(h);
    let dt = DT_dq1(h);
    // Entry (row part, column j) of head h; row r·SPLIT + part is at + r·SPLIT·dv.
    let sbase = h * DK * dv + part * dv + j;
    let rstep = SPLIT * dv;

    var s: array<f32, R>;
    if live {
//#unroll r R
        s[%{r}] = S[sbase + %{r}u * rstep];
//#end
    }
//#if TREE
    let hs = nv * DK * dv;
//#endif
    for (var t = 0u; t < t_n; t++) {
//#if TREE
        let par = Par[t];
        if live && par != i32(t) - 1 {
            if par < 0 {
//#unroll r R
                s[%{r}] = S[sbase + %{r}u * rstep];
//#end
            } else {
                let src = u32(par) * hs + sbase;
//#unroll r R
                s[%{r}] = Tok[src + %{r}u * rstep];
//#end
            }
        }
//#endif
        let row = t * qkv_stride;
        for (var i = tid; i < DK; i += WG) {
            qs[i] = QKV[row + kh * DK + i];
            ks[i] = QKV[row + key_dim + kh * DK + i];
//#if LOG
            if logs_qk {
                Lg[t * log_row + kh * DK + i] = qs[i];
                Lg[t * log_row + key_dim + kh * DK + i] = ks[i];
            }
//#endif
        }
        workgroupBarrier();
        var sq = vec2(0.0);
//#unroll r R
        let q%{r} = qs[%{r}u * SPLIT + part];
        let k%{r} = ks[%{r}u * SPLIT + part];
        sq += vec2(q%{r} * q%{r}, k%{r} * k%{r});
//#end
        let n2 = col_sum(sq, lane);
        let rq = 1.0 / sqrt(n2.x + eps);
        let rk = 1.0 / sqrt(n2.y + eps);
        let b_raw = B[b_off + t * ba_stride + h];
        let a_raw = A[a_off + t * ba_stride + h];
        let beta = 1.0 / (1.0 + exp(-b_raw));
        let decay = exp(sa * softplus(a_raw + dt));
        var kv = 0.0;
//#unroll r R
        s[%{r}] *= decay;
        kv += s[%{r}] * (k%{r} * rk);
//#end
        kv = col_sum(vec2(kv, 0.0), lane).x;
        var v = 0.0;
        if live {
            v = QKV[row + 2u * key_dim + h * dv + j];
        }
//#if LOG
        if live && part == 0u {
            Lg[t * log_row + 2u * key_dim + h * dv + j] = v;
        }
        if wid.y == 0u && tid == 0u {
            Lg[t * log_row + conv_dim + h] = b_raw;
            Lg[t * log_row + conv_dim + nv + h] = a_raw;
        }
//#endif
        let delta = (v - kv) * beta;
        var o = 0.0;
//#unroll r R
        s[%{r}] += (k%{r} * rk) * delta;
        o += s[%{r}] * ((q%{r} * rq) * q_scale);
//#end
        o = col_sum(vec2(o, 0.0), lane).x;
        if live && part == 0u {
            O[(t * nv + h) * dv + j] = o;
        }
//#if TREE
        if live {
            let dst = t * hs + sbase;
//#unroll r R
            Tok[dst + %{r}u * rstep] = s[%{r}];
//#end
        }
//#endif
        // qs, ks are rewritten for the next token.
        workgroupBarrier();
    }
//#if !TREE
//#if !LOG
    if live {
//#unroll r R
        S[sbase + %{r}u * rstep] = s[%{r}];
//#end
    }
//#endif
//#endif
}
