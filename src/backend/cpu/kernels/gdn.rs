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
    let (nk, nv, dk, dv) = (p.nk, p.nv, p.dk, p.dv);
    let (key_dim, conv_dim) = (p.key_dim(), p.conv_dim());
    let steps = qkv.len() / conv_dim;
    // HF multiplies the f32 tensor by the Python float `1 / dk ** 0.5`, rounded to f32.
    let q_scale = (1.0 / (dk as f64).sqrt()) as f32;

    // Normalise q and k once per (token, key head); value heads sharing a key head reuse them.
    let mut q = vec![0.0f32; steps * key_dim];
    let mut k = vec![0.0f32; steps * key_dim];
    for (t, row) in qkv.chunks_exact(conv_dim).enumerate() {
        let qt = &mut q[t * key_dim..(t + 1) * key_dim];
        for (src, dst) in row[..key_dim].chunks_exact(dk).zip(qt.chunks_exact_mut(dk)) {
            // l2norm first, then the scale as a separate product (HF's order).
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

    // Each head's outputs for all tokens, `[T, dv]`, gathered into `[T, nv, dv]` afterwards.
    let per_head: Vec<Vec<f32>> = state
        .par_chunks_mut(dk * dv)
        .enumerate()
        .map(|(h, s)| {
            let kh = p.head_map.key_head(h, nk, nv);
            let mut o = vec![0.0f32; steps * dv];
            let mut kv = vec![0.0f32; dv];
            for (t, ot) in o.chunks_exact_mut(dv).enumerate() {
                let beta = sigmoid(gates.b[t * nv + h]);
                let g = gates.ssm_a[h] * softplus(gates.a[t * nv + h] + gates.dt_bias[h]);
                let decay = g.exp();
                let qt = &q[(t * nk + kh) * dk..(t * nk + kh + 1) * dk];
                let kt = &k[(t * nk + kh) * dk..(t * nk + kh + 1) * dk];
                let v = &qkv[t * conv_dim + 2 * key_dim + h * dv..][..dv];

                for x in s.iter_mut() {
                    *x *= decay;
                }
                // kv = Sᵀk: column sums over dk, accumulated in index order of i.
                sum_rows_weighted(s, kt, &mut kv);
                // δ = β·(v − kv), then the rank-1 update S[i][j] += k[i]·δ[j].
                for (d, vj) in kv.iter_mut().zip(v) {
                    *d = (vj - *d) * beta;
                }
                for (srow, ki) in s.chunks_exact_mut(dv).zip(kt) {
                    for (x, d) in srow.iter_mut().zip(&kv) {
                        *x += ki * d;
                    }
                }
                // o = Sᵀq with the updated state.
                sum_rows_weighted(s, qt, ot);
            }
            o
        })
        .collect();

    for (t, ot) in out.chunks_exact_mut(nv * dv).enumerate() {
        for (h, oh) in ot.chunks_exact_mut(dv).enumerate() {
            oh.copy_from_slice(&per_head[h][t * dv..(t + 1) * dv]);
        }
    }
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
