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
// a column read distinct workgroup-memory banks. Every lane sums the squares, k·S and q·S over
// its rows and the SPLIT lanes of a column combine them with xor shuffles (SG: needs subgroups
// of at least SPLIT lanes, which the lowering checks) or through workgroup memory. The butterfly
// gives every lane of a column the same bits (float addition commutes).
//
// Tokens go in chunks of CH (≤ COLS). A chunk first stages what does not depend on the state:
// the raw q, k and v in workgroup memory, the gates (invocation c takes token c) and the q, k
// norms (column c's lanes take token c, each part summing its rows as above); then the
// recurrence runs token by token with no global load, gate or norm on its path. (Staging and
// normalising per token put two barriers and the gates' exp/log on every token's path.) A
// token's values are computed the same way wherever it sits, so its results do not depend on T
// or on its place in the call.
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
// WG = COLS·SPLIT, CH (tokens a chunk, ≤ COLS). Params: 0 T, 1 nk, 2 nv, 3 dk, 4 dv, 5 head map (0 tiled, 1 grouped),
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

// A chunk's raw q and k (token c at c·DK), its norms (1/‖q‖, 1/‖k‖), gates (β, decay) and the
// workgroup's v columns (token c at c·COLS).
var<workgroup> qs: array<f32, CH * DK>;
var<workgroup> ks: array<f32, CH * DK>;
var<workgroup> nrm: array<vec2<f32>, CH>;
var<workgroup> gate: array<vec2<f32>, CH>;
var<workgroup> vs: array<f32, CH * COLS>;
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
    for (var t0 = 0u; t0 < t_n; t0 += CH) {
        let n = min(CH, t_n - t0);
        // The chunk's inputs, which do not depend on the state: raw q, k and v, and the gates
        // (invocation c takes token c).
        for (var e = tid; e < n * DK; e += WG) {
            let row = (t0 + e / DK) * qkv_stride + kh * DK + e % DK;
            qs[e] = QKV[row];
            ks[e] = QKV[row + key_dim];
//#if LOG
            if logs_qk {
                let lrow = (t0 + e / DK) * log_row + kh * DK + e % DK;
                Lg[lrow] = qs[e];
                Lg[lrow + key_dim] = ks[e];
            }
//#endif
        }
        for (var e = tid; e < n * COLS; e += WG) {
            let jj = wid.y * COLS + e % COLS;
            var v = 0.0;
            if jj < dv {
                v = QKV[(t0 + e / COLS) * qkv_stride + 2u * key_dim + h * dv + jj];
//#if LOG
                Lg[(t0 + e / COLS) * log_row + 2u * key_dim + h * dv + jj] = v;
//#endif
            }
            vs[e] = v;
        }
        if tid < n {
            let b_raw = B[b_off + (t0 + tid) * ba_stride + h];
            let a_raw = A[a_off + (t0 + tid) * ba_stride + h];
            gate[tid] = vec2(1.0 / (1.0 + exp(-b_raw)), exp(sa * softplus(a_raw + dt)));
//#if LOG
            if wid.y == 0u {
                Lg[(t0 + tid) * log_row + conv_dim + h] = b_raw;
                Lg[(t0 + tid) * log_row + conv_dim + nv + h] = a_raw;
            }
//#endif
        }
        workgroupBarrier();
        // The norms: the lanes of column c take token c (CH ≤ COLS), each part summing its rows as
        // every column did when the norms were computed per token, so the bits are those.
        {
            let c = lane / SPLIT;
            var sq = vec2(0.0);
            if c < n {
//#unroll r R
                let q%{r} = qs[c * DK + %{r}u * SPLIT + part];
                let k%{r} = ks[c * DK + %{r}u * SPLIT + part];
                sq += vec2(q%{r} * q%{r}, k%{r} * k%{r});
//#end
            }
            let n2 = col_sum(sq, lane);
            if c < n && part == 0u {
                nrm[c] = vec2(1.0 / sqrt(n2.x + eps), 1.0 / sqrt(n2.y + eps));
            }
        }
        workgroupBarrier();
        // The recurrence, token by token: no global load, gate or norm on its path.
        for (var c = 0u; c < n; c++) {
            let t = t0 + c;
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
            let rq = nrm[c].x;
            let rk = nrm[c].y;
            let beta = gate[c].x;
            let decay = gate[c].y;
            var kv = 0.0;
//#unroll r R
            let k%{r} = ks[c * DK + %{r}u * SPLIT + part];
            s[%{r}] *= decay;
            kv += s[%{r}] * (k%{r} * rk);
//#end
            kv = col_sum(vec2(kv, 0.0), lane).x;
            let delta = (vs[c * COLS + lane / SPLIT] - kv) * beta;
            var o = 0.0;
//#unroll r R
            s[%{r}] += (k%{r} * rk) * delta;
            o += s[%{r}] * ((qs[c * DK + %{r}u * SPLIT + part] * rq) * q_scale);
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
        }
        // The next chunk rewrites the staged inputs.
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
