//! `MatMul` (`y = x · wᵀ`) and `Embed` (row gather), over weights of any dequantizable type.

use super::math::dot;
use super::weight::Weight;
use super::{bad_input, internal};
use crate::backend::BackendError;
use crate::graph::{Op, TensorDecl};
use rayon::prelude::*;

/// `y[n, m] = Σ_k x[n, k] · w[m, k]` for `x [N, K]`, `w [M, K]`, `y [N, M]`.
///
/// Parallel over weight rows: each weight row is dequantized once (into a per-thread scratch)
/// and dotted with every row of `x`, so quantized weights are decoded exactly once per call.
pub(super) fn matmul(
    x: &[f32],
    w: &Weight,
    n: usize,
    k: usize,
    m: usize,
    y: &mut [f32],
) -> Result<(), BackendError> {
    if n == 0 || m == 0 {
        return Ok(());
    }
    // Work column-major (one contiguous column of N results per weight row), then transpose:
    // this keeps every task's writes disjoint without unsafe code.
    let mut cols = vec![0.0f32; m * n];
    cols.par_chunks_mut(n).enumerate().try_for_each_init(
        || vec![0.0f32; k],
        |scratch, (row, col)| {
            let wr = w.row(row, k, scratch)?;
            for (out, xr) in col.iter_mut().zip(x.chunks_exact(k.max(1))) {
                *out = dot(xr, wr);
            }
            Ok::<(), BackendError>(())
        },
    )?;
    for (row, col) in cols.chunks_exact(n).enumerate() {
        for (i, v) in col.iter().enumerate() {
            y[i * m + row] = *v;
        }
    }
    Ok(())
}

/// `out[t] = table[ids[t]]`, dequantized, for `table [vocab, dim]`. An id outside the table is
/// a bad input (token ids come from callers and tokenizers, not from the graph).
pub(super) fn embed(
    table: &Weight,
    vocab: usize,
    dim: usize,
    ids: &[i32],
    ids_decl: &TensorDecl,
    out: &mut [f32],
) -> Result<(), BackendError> {
    if let Some((t, id)) = ids
        .iter()
        .enumerate()
        .find(|(_, id)| usize::try_from(**id).ok().is_none_or(|i| i >= vocab))
    {
        return Err(bad_input(
            ids_decl,
            format!("token id {id} at {t} is outside the vocabulary of {vocab}"),
        ));
    }
    if dim == 0 {
        return Ok(());
    }
    if out.len() != ids.len() * dim {
        return Err(internal(&Op::Embed, "output size disagrees with the ids"));
    }
    let mut scratch = vec![0.0f32; dim];
    for (row, id) in out.chunks_exact_mut(dim).zip(ids) {
        // Ids were checked non-negative and in range above.
        row.copy_from_slice(table.row(*id as usize, dim, &mut scratch)?);
    }
    Ok(())
}
