//! `GatedDeltaNet`: the gated delta rule in its recurrent form, token by token (model notes
//! §4.3–4.4), exactly as HF's `torch_recurrent_gated_delta_rule`.

use super::math::{sigmoid, softplus};
use super::norm::l2_norm_row;
use crate::graph::GdnParams;
use rayon::prelude::*;

/// The per-token gate inputs and per-head gate weights.
pub(super) struct Gates<'a> {
    /// `b [T, nv]`: `beta = sigmoid(b)`.
    pub b: &'a [f32],
    /// `a [T, nv]`: `g = ssm_a · softplus(a + dt_bias)`.
    pub a: &'a [f32],
    /// `[nv]`, `−exp(A_log)`.
    pub ssm_a: &'a [f32],
    /// `[nv]`.
    pub dt_bias: &'a [f32],
}

/// q and k of every (token, key head), L2-normalised, q then scaled by `dk^-0.5` (HF's
/// order); value heads sharing a key head reuse them. `[T, nk·dk]` each.
fn normalised_qk(p: &GdnParams, qkv: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let (dk, key_dim, conv_dim) = (p.dk, p.key_dim(), p.conv_dim());
    let steps = qkv.len() / conv_dim;
    // HF multiplies the f32 tensor by the Python float `1 / dk ** 0.5`, rounded to f32.
    let q_scale = (1.0 / (dk as f64).sqrt()) as f32;
    let mut q = vec![0.0f32; steps * key_dim];
    let mut k = vec![0.0f32; steps * key_dim];
    for (t, row) in qkv.chunks_exact(conv_dim).enumerate() {
        let qt = &mut q[t * key_dim..(t + 1) * key_dim];
        for (src, dst) in row[..key_dim].chunks_exact(dk).zip(qt.chunks_exact_mut(dk)) {
            l2_norm_row(src, p.l2_eps, 1.0, dst);
            for v in dst.iter_mut() {
                *v *= q_scale;
            }
        }
        let kt = &mut k[t * key_dim..(t + 1) * key_dim];
        for (src, dst) in row[key_dim..2 * key_dim]
            .chunks_exact(dk)
            .zip(kt.chunks_exact_mut(dk))
        {
            l2_norm_row(src, p.l2_eps, 1.0, dst);
        }
    }
    (q, k)
}

/// The inputs of one call, shared by every head.
struct Rows<'a> {
    p: &'a GdnParams,
    qkv: &'a [f32],
    q: &'a [f32],
    k: &'a [f32],
    gates: &'a Gates<'a>,
}

impl Rows<'_> {
    /// Token t of value head h on the head's state `s [dk, dv]`:
    /// `S = e^g · S; kv = Sᵀk; δ = β·(v − kv); S += k ⊗ δ; o = Sᵀq`. `kv` is `[dv]` scratch.
    fn token(&self, h: usize, t: usize, s: &mut [f32], kv: &mut [f32], ot: &mut [f32]) {
        let p = self.p;
        let (nk, nv, dk, dv) = (p.nk, p.nv, p.dk, p.dv);
        let (key_dim, conv_dim) = (p.key_dim(), p.conv_dim());
        let kh = p.head_map.key_head(h, nk, nv);
        let g = self.gates;
        let beta = sigmoid(g.b[t * nv + h]);
        let decay = (g.ssm_a[h] * softplus(g.a[t * nv + h] + g.dt_bias[h])).exp();
        let qt = &self.q[(t * nk + kh) * dk..(t * nk + kh + 1) * dk];
        let kt = &self.k[(t * nk + kh) * dk..(t * nk + kh + 1) * dk];
        let v = &self.qkv[t * conv_dim + 2 * key_dim + h * dv..][..dv];
        for x in s.iter_mut() {
            *x *= decay;
        }
        // kv = Sᵀk: column sums over dk, accumulated in index order of i.
        sum_rows_weighted(s, kt, kv);
        // δ = β·(v − kv), then the rank-1 update S[i][j] += k[i]·δ[j].
        for (d, vj) in kv.iter_mut().zip(v) {
            *d = (vj - *d) * beta;
        }
        for (srow, ki) in s.chunks_exact_mut(dv).zip(kt) {
            for (x, d) in srow.iter_mut().zip(kv.iter()) {
                *x += ki * d;
            }
        }
        // o = Sᵀq with the updated state.
        sum_rows_weighted(s, qt, ot);
    }
}

/// Gathers per-head outputs `[nv][T, dv]` into `out [T, nv, dv]`.
fn gather_heads(per_head: &[Vec<f32>], dv: usize, out: &mut [f32]) {
    for (t, ot) in out.chunks_exact_mut(per_head.len() * dv).enumerate() {
        for (h, oh) in ot.chunks_exact_mut(dv).enumerate() {
            oh.copy_from_slice(&per_head[h][t * dv..(t + 1) * dv]);
        }
    }
}

/// `qkv [T, 2·nk·dk + nv·dv]`, gates, `state [nv, dk, dv]` -> `o [T, nv, dv]`.
///
/// Per token t and value head h with key head `kh = head_map.key_head(h)`:
/// `S = e^g · S; kv = Sᵀk; δ = β·(v − kv); S += k ⊗ δ; o = Sᵀq`, with q, k L2-normalised and
/// q scaled by `dk^-0.5`. Heads are independent, so they run in parallel, each over all tokens.
pub(super) fn gated_delta_net(
    p: &GdnParams,
    qkv: &[f32],
    gates: &Gates,
    state: &mut [f32],
    out: &mut [f32],
) {
    let (dk, dv) = (p.dk, p.dv);
    let steps = qkv.len() / p.conv_dim();
    let (q, k) = normalised_qk(p, qkv);
    let rows = Rows {
        p,
        qkv,
        q: &q,
        k: &k,
        gates,
    };
    // Each head's outputs for all tokens, `[T, dv]`, gathered into `[T, nv, dv]` afterwards.
    let per_head: Vec<Vec<f32>> = state
        .par_chunks_mut(dk * dv)
        .enumerate()
        .map(|(h, s)| {
            let mut o = vec![0.0f32; steps * dv];
            let mut kv = vec![0.0f32; dv];
            for (t, ot) in o.chunks_exact_mut(dv).enumerate() {
                rows.token(h, t, s, &mut kv, ot);
            }
            o
        })
        .collect();
    gather_heads(&per_head, dv, out);
}

/// [`gated_delta_net`] over a tree of rows (`Op::GatedDeltaNetTree`): row t starts from its
/// parent's state (`tokens[parent[t]]`, or `state` for `parent[t] < 0`) and its updated state
/// goes to `tokens [R, nv, dk, dv]` row t; `state` is only read. `parent` was checked
/// (`parent[t] < t`).
pub(super) fn gated_delta_net_tree(
    p: &GdnParams,
    qkv: &[f32],
    gates: &Gates,
    parent: &[i32],
    state: &[f32],
    tokens: &mut [f32],
    out: &mut [f32],
) {
    let (nv, dk, dv) = (p.nv, p.dk, p.dv);
    let hs = dk * dv;
    let steps = qkv.len() / p.conv_dim();
    let (q, k) = normalised_qk(p, qkv);
    let rows = Rows {
        p,
        qkv,
        q: &q,
        k: &k,
        gates,
    };
    // Per head: its outputs `[T, dv]` and its state after every row `[T, dk, dv]`.
    let per_head: Vec<(Vec<f32>, Vec<f32>)> = (0..nv)
        .into_par_iter()
        .map(|h| {
            let mut o = vec![0.0f32; steps * dv];
            let mut after = vec![0.0f32; steps * hs];
            let mut s = vec![0.0f32; hs];
            let mut kv = vec![0.0f32; dv];
            for (t, ot) in o.chunks_exact_mut(dv).enumerate() {
                match usize::try_from(parent[t]) {
                    Ok(pt) => s.copy_from_slice(&after[pt * hs..(pt + 1) * hs]),
                    Err(_) => s.copy_from_slice(&state[h * hs..(h + 1) * hs]),
                }
                rows.token(h, t, &mut s, &mut kv, ot);
                after[t * hs..(t + 1) * hs].copy_from_slice(&s);
            }
            (o, after)
        })
        .collect();
    for (h, (_, after)) in per_head.iter().enumerate() {
        for t in 0..steps {
            let at = (t * nv + h) * hs;
            tokens[at..at + hs].copy_from_slice(&after[t * hs..(t + 1) * hs]);
        }
    }
    let outs: Vec<Vec<f32>> = per_head.into_iter().map(|(o, _)| o).collect();
    gather_heads(&outs, dv, out);
}

/// [`gated_delta_net`] on a copy of `state` (`Op::GatedDeltaNetLog`): the state is left as
/// it was, and row t of `log [R, conv_dim + 2·nv]` receives `[qkv_t | b_t | a_t]`.
pub(super) fn gated_delta_net_log(
    p: &GdnParams,
    qkv: &[f32],
    gates: &Gates,
    state: &[f32],
    log: &mut [f32],
    out: &mut [f32],
) {
    let (cd, nv) = (p.conv_dim(), p.nv);
    let mut scratch = state.to_vec();
    gated_delta_net(p, qkv, gates, &mut scratch, out);
    let rows = log.chunks_exact_mut(p.log_width());
    for (t, (row, x)) in rows.zip(qkv.chunks_exact(cd)).enumerate() {
        row[..cd].copy_from_slice(x);
        row[cd..cd + nv].copy_from_slice(&gates.b[t * nv..(t + 1) * nv]);
        row[cd + nv..].copy_from_slice(&gates.a[t * nv..(t + 1) * nv]);
    }
}

/// [`gated_delta_net`] over the first `rows` rows of a [`gated_delta_net_log`] log
/// (`Op::GatedDeltaNetReplay`): the state advances as a step over those inputs would.
pub(super) fn gated_delta_net_replay(
    p: &GdnParams,
    rows: usize,
    ssm_a: &[f32],
    dt_bias: &[f32],
    state: &mut [f32],
    log: &[f32],
    out: &mut [f32],
) {
    let (cd, nv) = (p.conv_dim(), p.nv);
    let (mut qkv, mut b, mut a) = (Vec::new(), Vec::new(), Vec::new());
    for row in log.chunks_exact(p.log_width()).take(rows) {
        qkv.extend_from_slice(&row[..cd]);
        b.extend_from_slice(&row[cd..cd + nv]);
        a.extend_from_slice(&row[cd + nv..]);
    }
    let gates = Gates {
        b: &b,
        a: &a,
        ssm_a,
        dt_bias,
    };
    gated_delta_net(p, &qkv, &gates, state, out);
}

/// `acc[j] = Σ_i s[i][j] · x[i]` for `s [x.len(), acc.len()]`, summed in index order of `i`.
fn sum_rows_weighted(s: &[f32], x: &[f32], acc: &mut [f32]) {
    acc.fill(0.0);
    for (srow, xi) in s.chunks_exact(acc.len()).zip(x) {
        for (a, sv) in acc.iter_mut().zip(srow) {
            *a += sv * xi;
        }
    }
}
